"""`python -m toolchain COMMAND`: the command line, and the one place errors are caught."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.build import BuildRun, build_wheel
from toolchain.cli_common import Parser, existing_file, print_json, settings_values
from toolchain.cli_deliver import add_delivery_parsers
from toolchain.errors import ToolchainError, UsageError
from toolchain.fetch import fill_mirror
from toolchain.host import Host, detect_host
from toolchain.isa import SUPPORTED_ARCHES
from toolchain.kernels import describe, load_kernels, package_dir
from toolchain.memflag import DEFAULT_UTILIZATION, describe_node, node_memory, reservation
from toolchain.memory import MIB, gib
from toolchain.plan import BuildOptions, plan_build
from toolchain.provision import provision_gxx, provisioned_gxx
from toolchain.recipes import Recipe, default_recipes_dir, known_versions, load_recipe
from toolchain.report import render_host, render_plan
from toolchain.settings import (
    BUILD_SETTINGS,
    add_setting_flags,
)
from toolchain.shadowing import check_shadowing
from toolchain.spawn_lint import lint_script
from toolchain.tools import tool_version


def add_host_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpuinfo",
        type=existing_file,
        metavar="FILE",
        help="describe the machine of this saved /proc/cpuinfo instead of this one",
    )
    parser.add_argument(
        "--meminfo",
        type=existing_file,
        metavar="FILE",
        help="use this saved /proc/meminfo instead of this machine's",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def host_from_args(args: argparse.Namespace) -> Host:
    return detect_host(cpuinfo_file=args.cpuinfo, meminfo_file=args.meminfo)


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
    values = settings_values(args)
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
    with tempfile.TemporaryDirectory(prefix="vcb-kernels-") as empty:  # nothing can shadow vllm
        scratch = Path(empty)
        folder = package_dir(args.python, scratch)
        results = load_kernels(args.python, folder, arch=host.arch, isa=host.isa, cwd=scratch)
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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m toolchain", description="Build vLLM for CPUs, verify the wheel, publish it."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
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
    add_delivery_parsers(commands)
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
