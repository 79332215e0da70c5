"""`bench`: a wheel's generation speed, alone or against another wheel or a requirement."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from toolchain.cli.common import add_output_flags, existing_file, print_json, settings_values
from toolchain.errors import UsageError
from toolchain.settings import add_setting_flags
from toolchain.util.report import reporter
from toolchain.util.urls import redact_json


def cmd_bench(args: argparse.Namespace) -> int:
    from toolchain.options import pip_sources, work_dir
    from toolchain.util.files import atomic_path
    from toolchain.verify.bench import MAX_TOKENS, PROMPTS, BenchOptions, bench
    from toolchain.wheelfile import check_wheel

    values = settings_values(args)
    check_wheel(args.wheel)  # a wheel that cannot be read is refused before any install
    against = values["against"] or ""
    if against.endswith(".whl") and not Path(against).is_file():
        raise UsageError(f"--against {against}: no such wheel")
    options = BenchOptions(
        work_dir=work_dir(values),
        wheel=args.wheel,
        against=against,
        rounds=values["rounds"],
        model=args.model,
        sources=pip_sources(values),
    )
    result = bench(options)
    report = options.work_dir / "bench" / "report.json"
    with atomic_path(report) as temporary:
        temporary.write_text(json.dumps(redact_json(result.to_json()), indent=2) + "\n")
    if args.json:
        print_json(result.to_json())
        return 0
    names = "; ".join(f"{side.label} = {side.name}" for side in result.sides)
    reporter.result(
        f"\n{names}\n{result.rounds} round(s), interleaved; tok/s is the median over the "
        f"rounds, (min-max) their range; {PROMPTS['batch']} or {PROMPTS['single']} prompt(s), "
        f"{MAX_TOKENS} tokens each\n{result.table()}"
    )
    reporter.line(f"report: {report}")
    return 0


def configure_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "bench",
        help="tok/s of a wheel (fp32, bf16; one prompt and a batch), against another wheel",
    )
    parser.add_argument("wheel", type=existing_file, help="the wheel to measure (A)")
    parser.add_argument(
        "--model", type=Path, help="a local model folder (default: verify's generated tiny model)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON report")
    add_setting_flags(parser, "bench")
    add_output_flags(parser)
    parser.set_defaults(handler=cmd_bench)
