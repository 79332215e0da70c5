"""`kernel-tests`: vLLM upstream's CPU kernel tests on a wheel, case by case against another."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.cli.common import add_output_flags, existing_file, print_json, settings_values
from toolchain.settings import PYPI_SIMPLE, add_setting_flags
from toolchain.util.report import reporter
from toolchain.util.urls import checked_url, redact_json

if TYPE_CHECKING:  # the library is imported where the command runs (see toolchain/cli/__init__)
    from toolchain.verify.kernel_tests import KernelTestResult


def default_report(wheel: Path) -> Path:
    """Beside the first wheel, else (a folder this user cannot write) in the current folder."""
    name = f"{wheel.name.removesuffix('.whl')}.kernel-tests.json"
    return wheel.parent / name if os.access(wheel.parent, os.W_OK) else Path(name)


def cmd_kernel_tests(args: argparse.Namespace) -> int:
    from toolchain.compile.sources import release_sdist
    from toolchain.options import pip_sources, work_dir
    from toolchain.targets import default_recipes_dir
    from toolchain.util.files import atomic_path
    from toolchain.verify.kernel_tests import (
        DEFAULT_FILES,
        KernelTestOptions,
        kernel_tests,
        normalized_files,
        release_of,
    )
    from toolchain.verify.kernel_tests_report import render_counts
    from toolchain.wheelfile import check_wheel

    values = settings_values(args)
    wheels = tuple(w for w in (args.wheel, args.other) if w is not None)
    for wheel in wheels:  # a wheel that cannot be read is refused before any download
        check_wheel(wheel)
    sdist = release_sdist(
        release_of(wheels),
        recipes_dir=Path(values["recipes"]) if values["recipes"] else default_recipes_dir(),
        cache_root=work_dir(values) / "sdists",
        index_url=checked_url(values["index_url"] or PYPI_SIMPLE, "--index-url"),
        mirror=Path(values["sources"]).expanduser() if values["sources"] else None,
    )
    options = KernelTestOptions(
        work_dir=work_dir(values),
        wheels=wheels,
        sdist=sdist,
        files=normalized_files(args.file) if args.file else DEFAULT_FILES,
        sample=values["sample"],
        chunk_size=values["chunk"],
        sources=pip_sources(values),
    )
    result = kernel_tests(options)
    report = args.report or default_report(wheels[0])
    with atomic_path(report) as temporary:
        temporary.write_text(json.dumps(redact_json(result.to_json()), indent=2) + "\n")
    if args.json:
        print_json(result.to_json())
    else:
        names = "; ".join(f"{side.label} = {side.name}" for side in result.sides)
        reporter.result(f"\n{names}\n{render_counts(result.node_ids, result.outcomes)}")
        _verdict(result)
    reporter.line(f"report: {report}")
    return 0 if result.agree else 1


def _verdict(result: KernelTestResult) -> None:
    from toolchain.verify.kernel_tests_report import render_differences

    for unfinished in result.unfinished:
        reporter.result(
            f"chunk {unfinished.chunk} on {unfinished.side} gave no results, even alone: "
            f"{unfinished.summary()} (log: {unfinished.log})"
        )
    found = result.differences
    if found:
        listed = render_differences(found)
        reporter.result(f"\n{len(found)} case(s) whose outcome differs:\n{listed}")
    elif len(result.sides) > 1 and result.complete:
        reporter.result(f"\nall {len(result.node_ids)} cases: the same outcome on A and B")


def configure_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "kernel-tests",
        help="vLLM upstream's CPU kernel tests on a wheel; with a second wheel, the outcome of "
        "each case on both",
    )
    parser.add_argument("wheel", type=existing_file, help="the wheel to test (A)")
    parser.add_argument(
        "other", type=existing_file, nargs="?", help="a second wheel of the same release (B)"
    )
    parser.add_argument(
        "--file",
        action="append",
        metavar="PATH",
        help="a test file of the sdist, repeatable (default: tests/kernels/core/"
        "test_cpu_activation.py and tests/kernels/attention/test_cpu_attn.py)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="where the JSON report goes (default: beside the first wheel)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON report")
    add_setting_flags(parser, "kernel-tests")
    add_output_flags(parser)
    parser.set_defaults(handler=cmd_kernel_tests)
