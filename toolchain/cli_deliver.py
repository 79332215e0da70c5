"""Commands that take a built wheel further: verify it, publish it, install it elsewhere."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from toolchain import run
from toolchain.checks import FAIL, render, worst
from toolchain.cli_common import existing_file, print_json, settings_values
from toolchain.errors import UsageError
from toolchain.fetch import atomic_path
from toolchain.host import detect_host
from toolchain.index import publish_index
from toolchain.install_command import plan_install
from toolchain.memflag import DEFAULT_UTILIZATION
from toolchain.runtime_deps import PipSources
from toolchain.settings import add_setting_flags, settings_named
from toolchain.upload import upload
from toolchain.verify import CHECK_NAMES, VerifyOptions, verify

VERIFY_FLAGS = settings_named("find_links", "torch_index", "work_dir", "wheel_dir")
PUBLISH_FLAGS = settings_named("wheel_dir", "index_dir", "upload", "work_dir")
INSTALL_FLAGS = settings_named("index_dir", "index_url", "torch_index", "find_links", "work_dir")
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pip_sources(values: dict[str, Any]) -> PipSources:
    """--find-links folders and the torch index (default: PyTorch's CPU index) from settings."""
    return PipSources(
        find_links=tuple(Path(p) for p in (values["find_links"] or "").split(os.pathsep) if p),
        torch_index=values["torch_index"] or PYTORCH_CPU_INDEX,
    )


def newest_wheel(wheel_dir: Path) -> Path:
    wheels = sorted(wheel_dir.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise UsageError(
            f"no wheel in {wheel_dir}/",
            hint="give a wheel file, --index URL, or build one: nox -s build-wheel",
        )
    return wheels[-1]


def verify_options(args: argparse.Namespace) -> VerifyOptions:
    values = settings_values(args)
    chosen = [x for x in (args.wheel, args.index, args.python) if x]
    if len(chosen) > 1:
        raise UsageError("give one of WHEEL, --index and --python")
    wheel = args.wheel if chosen else newest_wheel(Path(values["wheel_dir"]))
    only = tuple(args.only.split(",")) if args.only else CHECK_NAMES
    unknown = sorted(set(only) - set(CHECK_NAMES))
    if unknown:
        raise UsageError(f"unknown checks {unknown}; known: {', '.join(CHECK_NAMES)}")
    if wheel is not None and not wheel.is_file():
        raise UsageError(f"{wheel}: no such wheel")
    return VerifyOptions(
        work_dir=Path(values["work_dir"]).expanduser(),
        project=args.project.resolve(),
        wheel=wheel,
        index_url=args.index,
        package=args.package,
        python=args.python,
        model=args.model,
        scripts=tuple(args.script or ()),
        utilization=args.gpu_memory_utilization,
        only=only,
        sources=pip_sources(values),
    )


def cmd_verify(args: argparse.Namespace) -> int:
    state = verify(verify_options(args))
    report = state.logs / "report.json"
    with atomic_path(report) as temporary:
        temporary.write_text(json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
    if args.json:
        print_json(state.to_json())
    else:
        print(render(state.results, state.checks_seconds))
        print(f"report: {report}")
    return 1 if worst(state.results) == FAIL else 0


def cmd_publish(args: argparse.Namespace) -> int:
    values = settings_values(args)
    wheels = sorted(Path(values["wheel_dir"]).glob("*.whl"))
    published = publish_index(wheels, Path(values["index_dir"]))
    for variant in sorted({w.variant for w in published.wheels}):
        names = [w.path.name for w in published.wheels if w.variant == variant]
        print(f"{variant}/simple/: {', '.join(names)}")
    state = "written" if published.changed else "unchanged (same wheels)"
    print(f"index {published.root} -> {published.generation.name}: {state}")
    if values["upload"]:
        log = Path(values["work_dir"]).expanduser() / "upload.log"
        report = upload(wheels, values["upload"], log)
        print(f"uploaded to {values['upload']}: {', '.join(report.uploaded) or 'nothing new'}")
        if report.skipped:
            print(f"already there, identical: {', '.join(report.skipped)}")
    return 0


def cmd_install_command(args: argparse.Namespace) -> int:
    values = settings_values(args)
    index_dir = Path(values["index_dir"])
    if not args.index and not index_dir.exists():
        raise UsageError(
            f"no index at {index_dir}", hint="publish one (nox -s publish) or give --index URL"
        )
    index = args.index or index_dir.absolute().as_uri()
    plan = plan_install(
        index,
        detect_host().isa,
        project=args.package,
        version=args.version,
        python=args.python,
        public_index=values["index_url"],
        sources=pip_sources(values),
    )
    print(plan.render())
    if args.run:
        log = Path(values["work_dir"]).expanduser() / "install.log"
        for command in plan.commands:
            run.run_logged(list(command), log=log, what="pip install")
        print(f"installed {plan.chosen.filename} (log: {log})")
    return 0


def add_delivery_parsers(commands: Any) -> None:
    _add_verify(commands)
    publish = commands.add_parser(
        "publish", help="write the per-variant static index; with --upload, send to a server"
    )
    add_setting_flags(publish, PUBLISH_FLAGS)
    publish.set_defaults(handler=cmd_publish)
    install = commands.add_parser(
        "install-command", help="print (or --run) the pip commands that install the right wheel"
    )
    install.add_argument("--index", metavar="URL", help="the internal index (default: --index-dir)")
    install.add_argument("--package", default="vllm")
    install.add_argument("--version", help="a release (0.32.0) or exact version (default: newest)")
    install.add_argument(
        "--python", type=Path, default=Path(sys.executable), help="the Python to install into"
    )
    install.add_argument("--run", action="store_true", help="run the commands too")
    add_setting_flags(install, INSTALL_FLAGS)
    install.set_defaults(handler=cmd_install_command)


def _add_verify(commands: Any) -> None:
    verify_cmd = commands.add_parser(
        "verify", help="install a wheel in a fresh venv and prove it works on this machine"
    )
    verify_cmd.add_argument(
        "wheel", nargs="?", type=Path, help="the wheel (default: the newest in wheels/)"
    )
    verify_cmd.add_argument("--index", metavar="URL", help="install from this package index")
    verify_cmd.add_argument("--package", default="vllm", help="distribution to take from --index")
    verify_cmd.add_argument(
        "--python", type=Path, help="check this existing environment's Python; install nothing"
    )
    verify_cmd.add_argument(
        "--model", type=Path, help="a local model folder (default: a generated tiny model)"
    )
    verify_cmd.add_argument(
        "--script",
        action="append",
        type=existing_file,
        metavar="FILE",
        help="a script of yours to check for a __main__ guard (repeatable)",
    )
    verify_cmd.add_argument(
        "--project",
        type=Path,
        default=Path.cwd(),
        help="the folder you run vLLM from, checked for shadowing (default: this one)",
    )
    verify_cmd.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=DEFAULT_UTILIZATION,
        help=f"the value you will run with (default: vLLM's {DEFAULT_UTILIZATION})",
    )
    verify_cmd.add_argument(
        "--only", metavar="CHECKS", help=f"comma-separated: {','.join(CHECK_NAMES)}"
    )
    verify_cmd.add_argument("--json", action="store_true", help="print one JSON report")
    add_setting_flags(verify_cmd, VERIFY_FLAGS)
    verify_cmd.set_defaults(handler=cmd_verify)
