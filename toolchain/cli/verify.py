"""`verify`, and each of its checks alone: `check-kernels`, `check-shadowing`, `lint-script`,
`check-memory`."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.cli.common import (
    add_output_flags,
    existing_file,
    print_json,
    settings_values,
    utilization,
)
from toolchain.errors import KernelCheckError, UsageError
from toolchain.settings import add_setting_flags
from toolchain.util.report import reporter
from toolchain.util.units import gib
from toolchain.util.urls import checked_url, redact_json
from toolchain.verify.memflag import DEFAULT_UTILIZATION, describe_node, node_memory, reservation
from toolchain.verify.results import FAIL

if TYPE_CHECKING:
    from toolchain.verify.flow import VerifyOptions


def cmd_lint_script(args: argparse.Namespace) -> int:
    from toolchain.verify.spawn_lint import lint_scripts

    findings = lint_scripts(args.files)
    for finding in findings:
        print(finding)
    if not findings:
        print(f"ok: no engine starts at import time in {len(args.files)} file(s)")
    return 1 if findings else 0


def cmd_check_shadowing(args: argparse.Namespace) -> int:
    from toolchain.verify.shadowing import check_shadowing

    shadows = check_shadowing(args.folder)
    for shadow in shadows:
        if shadow.wins:
            print(
                f"{shadow}: Python run from {args.folder} imports it instead of the installed "
                "vLLM (\"cannot import name 'LLM' from 'vllm' (unknown location)\"); run from "
                "another folder or rename it"
            )
        else:
            print(
                f"warning: {shadow}: an installed vLLM still wins over it, but a Python without "
                "vLLM run there imports it and fails (\"cannot import name 'LLM' from 'vllm' "
                '(unknown location)"); rename it'
            )
    if not shadows:
        print(f"ok: nothing in {args.folder} or on PYTHONPATH shadows the vllm package")
    return 1 if any(shadow.wins for shadow in shadows) else 0


def cmd_check_kernels(args: argparse.Namespace) -> int:
    from toolchain.detect.host import detect_host
    from toolchain.verify.kernels import describe, load_kernels, package_dir

    host = detect_host()
    with tempfile.TemporaryDirectory(prefix="vcb-kernels-") as empty:  # nothing can shadow vllm
        scratch = Path(empty)
        folder = package_dir(args.python, scratch)
        results = load_kernels(args.python, folder, arch=host.arch, isa=host.isa, cwd=scratch)
    if not results:
        raise KernelCheckError(
            f"{folder} holds no kernel libraries (_C*.so): not a CPU build of vLLM",
            hint="check the environment a CPU wheel was installed into: "
            "check-kernels --python VENV/bin/python",
        )
    for result in results:
        print(describe(result))
    loaded = [r for r in results if r.status == "ok"]
    broken = [r for r in results if r.status == "error"]
    return 0 if loaded and not broken else 1


def cmd_check_memory(args: argparse.Namespace) -> int:
    memory = node_memory(args.node)
    result = reservation(memory, args.utilization)
    print(describe_node(memory))
    margin = gib(result.margin_bytes)
    if result.leaves_margin:
        verdict = f"fits, leaving at least {margin} for vLLM's own processes"
    elif result.fits:
        verdict = (
            f"does NOT fit: it leaves less than the {margin} that vLLM's own processes take "
            "before it checks, so it refuses at start-up"
        )
    else:
        verdict = "does NOT fit: vLLM refuses to start"
    print(
        f"--gpu-memory-utilization {args.utilization} reserves "
        f"{gib(result.requested_bytes)} of CPU memory: {verdict}"
    )
    print(
        f"fits with {margin} to spare: --gpu-memory-utilization "
        f"{result.recommended_utilization:.2f}, or VLLM_CPU_KVCACHE_SPACE="
        f"{result.recommended_kvcache_gib} (GiB of KV cache)"
    )
    return 0 if result.leaves_margin else 1


def newest_wheel(wheel_dir: Path) -> Path:
    wheels = sorted(wheel_dir.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise UsageError(
            f"no wheel in {wheel_dir}/",
            hint="give a wheel file, --index URL, or build one: nox -s build-wheel",
        )
    return wheels[-1]


def verify_options(args: argparse.Namespace) -> VerifyOptions:
    from toolchain.options import pip_sources, work_dir
    from toolchain.verify.flow import VerifyOptions
    from toolchain.verify.registry import CHECK_NAMES
    from toolchain.wheelfile import check_wheel

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
    if wheel is not None:
        check_wheel(wheel)  # a wheel that cannot be read is refused before anything changes
    if args.python is not None and not args.python.is_file():
        raise UsageError(
            f"--python {args.python}: no such file",
            hint="give the python of an environment with vLLM installed (e.g. venv/bin/python)",
        )
    return VerifyOptions(
        work_dir=work_dir(values),
        project=args.project.resolve(),
        wheel=wheel,
        index_url=checked_url(args.index, "--index") if args.index else None,
        package=args.package,
        python=args.python,
        model=args.model,
        scripts=tuple(args.script or ()),
        utilization=args.gpu_memory_utilization,
        only=only,
        sources=pip_sources(values),
        emulate_cpu=values["emulate_cpu"],
    )


def cmd_verify(args: argparse.Namespace) -> int:
    from toolchain.util.files import atomic_path
    from toolchain.verify.flow import verify
    from toolchain.verify.results import render, worst

    state = verify(verify_options(args))
    report = state.logs / "report.json"
    with atomic_path(report) as temporary:
        temporary.write_text(
            json.dumps(redact_json(state.to_json()), indent=2, sort_keys=True) + "\n"
        )
    if args.json:
        print_json(state.to_json())
    else:
        if state.emulation:
            reporter.line(
                f"{state.emulation['summary']} ({state.emulation['root_suite']} root, "
                f"{state.emulation['root_identity'][:19]}...)"
            )
        reporter.result(render(state.results, state.checks_seconds))
        reporter.line(f"report: {report}")
    return 1 if worst(state.results) == FAIL else 0


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
        type=utilization,
        default=DEFAULT_UTILIZATION,
        help=f"the value you will run with (default: vLLM's {DEFAULT_UTILIZATION})",
    )
    verify_cmd.add_argument(
        "--only",
        metavar="CHECKS",
        help="comma-separated check names, as the report names them (default: every check)",
    )
    verify_cmd.add_argument("--json", action="store_true", help="print one JSON report")
    add_setting_flags(verify_cmd, "verify")
    add_output_flags(verify_cmd)
    verify_cmd.set_defaults(handler=cmd_verify)


def configure_parser(commands: Any) -> None:
    _add_verify(commands)
    lint = commands.add_parser(
        "lint-script", help="find scripts that start an engine outside a __main__ guard"
    )
    lint.add_argument("files", nargs="+", type=Path)
    lint.set_defaults(handler=cmd_lint_script)
    shadow = commands.add_parser(
        "check-shadowing", help="find a vllm folder or module that hides the installed one"
    )
    shadow.add_argument("folder", nargs="?", type=Path, default=Path.cwd())
    shadow.set_defaults(handler=cmd_check_shadowing)
    kernels = commands.add_parser(
        "check-kernels", help="load every vLLM kernel library, each in its own process"
    )
    kernels.add_argument(
        "--python",
        type=Path,
        default=Path(sys.executable),
        help="the Python of the environment to check (default: this one)",
    )
    kernels.set_defaults(handler=cmd_check_kernels)
    memory = commands.add_parser(
        "check-memory", help="what --gpu-memory-utilization reserves here, as vLLM computes"
    )
    memory.add_argument("--utilization", type=utilization, default=DEFAULT_UTILIZATION)
    memory.add_argument("--node", type=int, default=0, help="NUMA node of the worker")
    memory.set_defaults(handler=cmd_check_memory)
