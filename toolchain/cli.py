"""`python -m toolchain COMMAND`: the command line, and the one place errors are caught."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.build import BuildRun, build_wheel
from toolchain.checks import FAIL, render, worst
from toolchain.errors import ToolchainError, UsageError
from toolchain.fetch import atomic_path, fill_mirror
from toolchain.host import Host, detect_host
from toolchain.isa import SUPPORTED_ARCHES
from toolchain.kernels import describe, load_kernels, package_dir
from toolchain.memflag import DEFAULT_UTILIZATION, node_memory, reservation
from toolchain.memory import MIB
from toolchain.plan import BuildOptions, plan_build
from toolchain.provision import provision_gxx, provisioned_gxx
from toolchain.recipes import Recipe, default_recipes_dir, known_versions, load_recipe
from toolchain.report import gib, render_host, render_plan
from toolchain.settings import (
    BUILD_SETTINGS,
    add_setting_flags,
    read_toml_settings,
    resolve_settings,
)
from toolchain.shadowing import check_shadowing
from toolchain.spawn_lint import lint_script
from toolchain.tools import tool_version
from toolchain.verify import CHECK_NAMES, VerifyOptions, verify
from toolchain.verify_env import PipSources


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2 itself
        raise UsageError(message, hint=f"see: python -m toolchain {self.prog.split()[-1]} --help")


def _existing_file(value: str) -> Path:
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    return path


def add_host_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpuinfo",
        type=_existing_file,
        metavar="FILE",
        help="describe the machine of this saved /proc/cpuinfo instead of this one",
    )
    parser.add_argument(
        "--meminfo",
        type=_existing_file,
        metavar="FILE",
        help="use this saved /proc/meminfo instead of this machine's",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def host_from_args(args: argparse.Namespace) -> Host:
    return detect_host(cpuinfo_file=args.cpuinfo, meminfo_file=args.meminfo)


def print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def cmd_detect(args: argparse.Namespace) -> int:
    host = host_from_args(args)
    if args.json:
        print_json(host.to_json())
    else:
        print(render_host(host))
    host.require_supported()
    return 0


def options_from_args(args: argparse.Namespace) -> tuple[dict[str, Any], BuildOptions]:
    """Settings from flags, VCB_* variables and ./pyproject.toml, as the plan's options."""
    values = resolve_settings(
        BUILD_SETTINGS, vars(args), os.environ, read_toml_settings(Path("pyproject.toml"))
    )
    if values["jobs"] is not None and values["jobs"] < 1:
        raise UsageError(f"--jobs must be at least 1, not {values['jobs']}")
    options = BuildOptions(
        target=values["target"],
        jobs=values["jobs"],
        python=values["python"],
        cxx=values["cxx"],
        sources=_optional_path(values["sources"]),
        source_dir=_optional_path(values["source_dir"]),
        torch_index=values["torch_index"],
        find_links=tuple(Path(p) for p in (values["find_links"] or "").split(os.pathsep) if p),
        work_dir=Path(values["work_dir"]).expanduser(),
        wheel_dir=Path(values["wheel_dir"]),
        reserve_bytes=values["reserve_mib"] * MIB,
    )
    return values, options


def _optional_path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None


def recipe_from_values(values: dict[str, Any]) -> Recipe:
    recipes_dir = Path(values["recipes"]) if values["recipes"] else default_recipes_dir()
    versions = known_versions(recipes_dir)
    if not versions:
        raise UsageError(f"no recipes in {recipes_dir}", hint="point --recipes at a recipes folder")
    return load_recipe(recipes_dir, values["vllm"] or versions[-1])


def cmd_plan(args: argparse.Namespace) -> int:
    values, options = options_from_args(args)
    plan = plan_build(host_from_args(args), recipe_from_values(values), options)
    if args.json:
        print_json(plan.to_json())
    else:
        print(render_plan(plan))
    return 0


def cmd_build_wheel(args: argparse.Namespace) -> int:
    values, options = options_from_args(args)
    host = detect_host()
    plan = plan_build(host, recipe_from_values(values), options)
    build_wheel(
        BuildRun(
            plan=plan,
            host=host,
            index_url=values["index_url"],
            allow_cuda_torch=values["allow_cuda_torch"],
        )
    )
    return 0


def cmd_fetch_sources(args: argparse.Namespace) -> int:
    values, _ = options_from_args(args)
    repos = dict(_name_path(item) for item in args.git or [])
    fill_mirror(
        recipe_from_values(values),
        args.to,
        index_url=values["index_url"],
        arches=SUPPORTED_ARCHES if args.arch == "all" else (args.arch,),
        git_repos=repos,
    )
    return 0


def _name_path(item: str) -> tuple[str, Path]:
    name, sep, path = item.partition("=")
    if not sep or not path:
        raise UsageError(f"--git takes NAME=PATH (e.g. oneDNN=/src/oneDNN.git), not '{item}'")
    return name, Path(path)


def cmd_provision_toolchain(args: argparse.Namespace) -> int:
    _, options = options_from_args(args)
    host = detect_host()
    host.require_supported()
    log = options.work_dir / "provision.log"
    prefix = provision_gxx(options.work_dir, host.arch, log=log)
    cc, cxx = provisioned_gxx(prefix)
    print(f"g++ {tool_version(cxx)} ready: CC={cc} CXX={cxx} (log: {log})")
    return 0


def cmd_lint_script(args: argparse.Namespace) -> int:
    findings = []
    for path in args.files:
        try:
            findings += lint_script(path)
        except (OSError, SyntaxError) as exc:
            raise UsageError(f"cannot read {path} as Python: {exc}") from exc
    for finding in findings:
        print(finding)
    if not findings:
        print(f"ok: no engine starts at import time in {len(args.files)} file(s)")
    return 1 if findings else 0


def cmd_check_shadowing(args: argparse.Namespace) -> int:
    problems = check_shadowing(args.folder)
    for problem in problems:
        print(
            f"{problem}: Python run from {args.folder} imports it instead of the installed "
            "vLLM (\"cannot import name 'LLM' from 'vllm' (unknown location)\"); run from "
            "another folder or rename it"
        )
    if not problems:
        print(f"ok: nothing in {args.folder} or on PYTHONPATH shadows the vllm package")
    return 1 if problems else 0


def cmd_check_kernels(args: argparse.Namespace) -> int:
    host = detect_host()
    scratch = Path(tempfile.mkdtemp(prefix="vcb-kernels-"))  # nothing here can shadow vllm
    try:
        folder = package_dir(args.python, scratch)
        results = load_kernels(args.python, folder, arch=host.arch, isa=host.isa, cwd=scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not results:
        raise UsageError(f"{folder} holds no kernel libraries (_C*.so): not a CPU build of vLLM")
    for result in results:
        print(describe(result))
    loaded = [r for r in results if r.status == "ok"]
    broken = [r for r in results if r.status == "error"]
    return 0 if loaded and not broken else 1


def cmd_check_memory(args: argparse.Namespace) -> int:
    memory = node_memory(args.node)
    result = reservation(memory, args.utilization)
    print(
        f"NUMA node {memory.node} ({memory.source}): total {gib(memory.total_bytes)}, "
        f"available {gib(memory.available_bytes)}"
    )
    verdict = "fits" if result.fits else "does NOT fit: vLLM refuses to start"
    print(
        f"--gpu-memory-utilization {args.utilization} reserves "
        f"{gib(result.requested_bytes)} of CPU memory: {verdict}"
    )
    print(
        f"fits with 1 GiB to spare: --gpu-memory-utilization "
        f"{result.recommended_utilization:.2f}, or VLLM_CPU_KVCACHE_SPACE="
        f"{result.recommended_kvcache_gib} (GiB of KV cache)"
    )
    return 0 if result.fits else 1


VERIFY_SETTINGS = tuple(
    s for s in BUILD_SETTINGS if s.name in ("find_links", "torch_index", "work_dir", "wheel_dir")
)
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def verify_options(args: argparse.Namespace) -> VerifyOptions:
    values = resolve_settings(
        BUILD_SETTINGS, vars(args), os.environ, read_toml_settings(Path("pyproject.toml"))
    )
    chosen = [x for x in (args.wheel, args.index, args.python) if x]
    if len(chosen) > 1:
        raise UsageError("give one of WHEEL, --index and --python")
    wheel = args.wheel
    if not chosen:
        wheel = newest_wheel(Path(values["wheel_dir"]))
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
        sources=PipSources(
            find_links=tuple(Path(p) for p in (values["find_links"] or "").split(os.pathsep) if p),
            torch_index=values["torch_index"] or PYTORCH_CPU_INDEX,
        ),
    )


def newest_wheel(wheel_dir: Path) -> Path:
    wheels = sorted(wheel_dir.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise UsageError(
            f"no wheel in {wheel_dir}/ to verify",
            hint="give a wheel file, --index URL, or build one: nox -s build-wheel",
        )
    return wheels[-1]


def cmd_verify(args: argparse.Namespace) -> int:
    state = verify(verify_options(args))
    report = state.logs / "report.json"
    with atomic_path(report) as temporary:
        temporary.write_text(json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
    if args.json:
        print_json(state.to_json())
    else:
        print(render(state.results))
        print(f"report: {report}")
    return 1 if worst(state.results) == FAIL else 0


def add_verify_parser(commands: Any) -> None:
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
        type=_existing_file,
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
    add_setting_flags(verify_cmd, VERIFY_SETTINGS)
    verify_cmd.set_defaults(handler=cmd_verify)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m toolchain", description="Build vLLM for CPUs, verify the wheel, publish it."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    detect = commands.add_parser("detect", help="report this machine's CPU, memory and tools")
    add_host_options(detect)
    detect.set_defaults(handler=cmd_detect)
    plan = commands.add_parser("plan", help="print what a build would do, decided up front")
    add_host_options(plan)
    add_setting_flags(plan, BUILD_SETTINGS)
    plan.set_defaults(handler=cmd_plan)
    build = commands.add_parser("build-wheel", help="compile a vLLM CPU wheel into wheels/")
    add_setting_flags(build, BUILD_SETTINGS)
    build.set_defaults(handler=cmd_build_wheel)
    fetch = commands.add_parser(
        "fetch-sources", help="fill a source mirror for air-gapped builds (needs network)"
    )
    add_setting_flags(fetch, BUILD_SETTINGS)
    fetch.add_argument("--to", type=Path, required=True, help="the mirror folder to fill")
    fetch.add_argument("--arch", choices=[*SUPPORTED_ARCHES, "all"], default="all")
    fetch.add_argument(
        "--git",
        action="append",
        metavar="NAME=PATH",
        help="make NAME's archive from a local git repository instead of GitHub",
    )
    fetch.set_defaults(handler=cmd_fetch_sources)
    provision = commands.add_parser(
        "provision-toolchain", help="unpack a new enough g++ into a private prefix"
    )
    add_setting_flags(provision, BUILD_SETTINGS)
    provision.set_defaults(handler=cmd_provision_toolchain)
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
    memory.add_argument("--utilization", type=float, default=DEFAULT_UTILIZATION)
    memory.add_argument("--node", type=int, default=0, help="NUMA node of the worker")
    memory.set_defaults(handler=cmd_check_memory)
    add_verify_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code: int = args.handler(args)
        return code
    except ToolchainError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  next: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
