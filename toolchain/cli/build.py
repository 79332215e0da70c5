"""`plan`, `build-wheel`, `fetch-sources`, `provision-toolchain`: from recipe to wheel."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.cli.common import (
    add_host_options,
    add_mac_options,
    add_output_flags,
    host_from_args,
    print_json,
    recipe_from_values,
    recipes_from,
    settings_values,
)
from toolchain.errors import UsageError
from toolchain.settings import add_setting_flags
from toolchain.util.platform import SUPPORTED_ARCHES, machine_arch
from toolchain.util.urls import redact

if TYPE_CHECKING:
    from toolchain.options import BuildOptions


def options_from_args(args: argparse.Namespace) -> tuple[dict[str, Any], BuildOptions]:
    """Settings from flags, VCB_* variables and ./pyproject.toml, as the plan's options."""
    from toolchain.options import build_options

    values = settings_values(args)
    return values, build_options(values)


def cmd_plan(args: argparse.Namespace) -> int:
    from toolchain.compile.preflight import readiness, render_readiness, require_ready
    from toolchain.plan.planner import plan_build
    from toolchain.plan.render import render_plan

    values, options = options_from_args(args)
    plan = plan_build(host_from_args(args), recipe_from_values(values), options)
    # a macOS plan is built on the Mac it describes: this machine's readiness says nothing of it
    checks = readiness(plan, options) if plan.macos is None else ()
    if args.json:
        found = {"preflight": [check.to_json() for check in checks]} if checks else {}
        print_json(plan.to_json() | found)
    else:
        block = render_readiness(checks) if checks else []
        print(redact("\n".join([render_plan(plan), *block])))
    if args.check:
        require_ready(checks)
    return 0


def cmd_build_wheel(args: argparse.Namespace) -> int:
    from toolchain.compile.runner import BuildRun
    from toolchain.compile.steps import build_wheel
    from toolchain.detect.host import detect_host
    from toolchain.plan.planner import plan_build

    values, options = options_from_args(args)
    host = detect_host(sysctl_file=args.sysctl, vm_stat_file=args.vm_stat)
    plan = plan_build(host, recipe_from_values(values), options)
    build_wheel(BuildRun(plan=plan, host=host, options=options))
    return 0


def cmd_fetch_sources(args: argparse.Namespace) -> int:
    from toolchain.compile.sources import fill_mirror

    values, options = options_from_args(args)
    repos = _git_repos(args.git or [])
    fill_mirror(
        recipe_from_values(values),
        args.to,
        index_url=options.index_url,
        arches=_mirror_arches(args.mirror_arch),
        git_repos=repos,
    )
    return 0


def _default_arch() -> str:
    return machine_arch() if machine_arch() in SUPPORTED_ARCHES else SUPPORTED_ARCHES[0]


def _mirror_arches(wanted: str | None) -> tuple[str, ...]:
    """--arch, or this machine's architecture (every supported one on another machine)."""
    if wanted == "all" or (wanted is None and machine_arch() not in SUPPORTED_ARCHES):
        return SUPPORTED_ARCHES
    return (wanted or machine_arch(),)


def cmd_matrix(args: argparse.Namespace) -> int:
    from toolchain.plan.matrix import build_matrix

    cells = build_matrix(
        recipes_from(args.recipes, args.vllm),
        arch=args.arch,
        targets=args.target or (),
        pythons=args.python or (),
        cache=args.cache,
    )
    if args.json:
        print_json({"include": [cell.to_json() for cell in cells]})
        return 0
    for cell in cells:
        needs = " ".join(cell.must_have) or "nothing"
        lacks = f"; must lack {' '.join(cell.must_lack)}" if cell.must_lack else ""
        print(f"{cell.name}: {cell.command}\n    build host needs {needs}{lacks}")
    return 0


def _name_path(item: str) -> tuple[str, Path]:
    name, sep, path = item.partition("=")
    if not sep or not path or not name:
        raise UsageError(
            f"--git takes NAME=PATH (e.g. oneDNN=/src/oneDNN.git), not '{item}'",
            hint="see: python -m toolchain fetch-sources --help",
        )
    return name, Path(path)


def _git_repos(items: list[str]) -> dict[str, Path]:
    """--git NAME=PATH, each NAME once (a second one would silently win)."""
    repos: dict[str, Path] = {}
    for name, path in map(_name_path, items):
        if name in repos:
            raise UsageError(
                f"--git {name} is given twice ({repos[name]}, {path})",
                hint="keep one --git per source",
            )
        repos[name] = path
    return repos


def cmd_provision_toolchain(args: argparse.Namespace) -> int:
    from toolchain.compile.cross import provision_cross
    from toolchain.compile.provision import provision_gxx
    from toolchain.detect.host import detect_host
    from toolchain.detect.tools import tool_version
    from toolchain.plan.compiler import provisioned_gxx
    from toolchain.plan.planner import plan_build

    values, options = options_from_args(args)
    host = detect_host()
    host.require_supported()
    log = options.work_dir / "provision.log"
    if options.target is not None:  # an Arm target on x86: the cross compiler and sysroot
        cross = plan_build(host, recipe_from_values(values), options).cross
        if cross is not None:
            done = provision_cross(cross, options.work_dir, log=log)
            print(
                f"{cross.host_machine} cross g++ {done['compiler_version']} ready: "
                f"CXX={cross.cxx}, sysroot {cross.sysroot} (log: {log})"
            )
            return 0
    prefix = provision_gxx(options.work_dir, host.arch, log=log)
    cc, cxx = provisioned_gxx(prefix)
    print(f"g++ {tool_version(cxx)} ready: CC={cc} CXX={cxx} (log: {log})")
    return 0


def configure_parser(commands: Any) -> None:
    plan = commands.add_parser("plan", help="print what a build would do, decided up front")
    add_host_options(plan)
    add_setting_flags(plan, "plan")
    plan.add_argument(
        "--check",
        action="store_true",
        help="exit 14 when something the build needs is missing (the preflight block's lines)",
    )
    plan.set_defaults(handler=cmd_plan)
    build = commands.add_parser("build-wheel", help="compile a vLLM CPU wheel into wheels/")
    add_setting_flags(build, "build-wheel")
    add_mac_options(build)  # a Mac's plan, to be refused off that Mac (no cross build to macOS)
    add_output_flags(build)
    build.set_defaults(handler=cmd_build_wheel)
    fetch = commands.add_parser(
        "fetch-sources", help="fill a source mirror for air-gapped builds (needs network)"
    )
    add_setting_flags(fetch, "fetch-sources")
    fetch.add_argument("--to", type=Path, required=True, help="the mirror folder to fill")
    fetch.add_argument(
        "--arch",
        dest="mirror_arch",  # not plan's --arch setting: this one also takes "all"
        choices=[*SUPPORTED_ARCHES, "all"],
        help="fetch the sources these builds need (default: this machine's architecture)",
    )
    fetch.add_argument(
        "--git",
        action="append",
        metavar="NAME=PATH",
        help="make NAME's archive from a local git repository instead of GitHub",
    )
    add_output_flags(fetch)
    fetch.set_defaults(handler=cmd_fetch_sources)
    matrix = commands.add_parser(
        "matrix", help="a CI build matrix (GitHub Actions include list with --json)"
    )
    matrix.add_argument("--vllm", action="append", help="a version (repeat; default: every recipe)")
    matrix.add_argument("--target", action="append", help="a target (repeat; default: every one)")
    matrix.add_argument("--python", action="append", help="a Python (repeat; default: preferred)")
    matrix.add_argument("--arch", choices=SUPPORTED_ARCHES, default=_default_arch())
    matrix.add_argument("--recipes", help="recipes folder (default: the shipped ones)")
    matrix.add_argument(
        "--cache",
        action="store_true",
        help='cells build with --cache "$VCB_CACHE" (a shared cache)',
    )
    matrix.add_argument("--json", action="store_true", help='print {"include": [cells]}')
    matrix.set_defaults(handler=cmd_matrix)
    provision = commands.add_parser(
        "provision-toolchain",
        help="unpack a new enough g++ into a private prefix; with an Arm --target on x86, "
        "the cross g++ and the target's sysroot",
    )
    add_setting_flags(provision, "provision-toolchain")
    provision.set_defaults(handler=cmd_provision_toolchain)
