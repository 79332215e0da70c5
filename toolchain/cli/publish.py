"""`publish` and `install-command`: the wheels to an index, and from it onto a machine."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from toolchain.cli.common import add_output_flags, settings_values
from toolchain.errors import ToolMissingError, UsageError
from toolchain.settings import add_setting_flags
from toolchain.util.report import reporter
from toolchain.util.urls import checked_url, redact


def cmd_publish(args: argparse.Namespace) -> int:
    from toolchain.options import publish_options
    from toolchain.publish import wheel_variants
    from toolchain.publish.index import publish_index, read_wheels
    from toolchain.publish.upload import upload
    from toolchain.targets import load_catalog
    from toolchain.util.datafile import load_json

    options = publish_options(settings_values(args))
    wheels = sorted(options.wheel_dir.glob("*.whl"))
    catalog = load_catalog(options.recipes)
    read_wheels(wheels, catalog)  # every wheel readable and named well before anything is sent
    if options.upload:
        # the upload goes first: a refused or failed upload leaves the static index as it was
        log = options.work_dir / "upload.log"
        report = upload(wheels, options.upload, log, options.server_kind)
        where = redact(options.upload)
        reporter.line(f"uploaded to {where}: {', '.join(report.uploaded) or 'nothing new'}")
        if report.skipped:
            reporter.line(f"already there, identical: {', '.join(report.skipped)}")
    published = publish_index(
        wheels, options.index_dir, wheel_variants=options.wheel_variants, catalog=catalog
    )
    for variant in sorted({w.variant for w in published.wheels}):
        names = [w.path.name for w in published.wheels if w.variant == variant]
        reporter.line(f"{variant}/simple/: {', '.join(names)}")
    if options.wheel_variants:
        pages = sorted((published.root / wheel_variants.FOLDER / "simple").glob("*/index.json"))
        names = [f["filename"] for page in pages for f in load_json(page)["files"]]
        reporter.line(
            f"{wheel_variants.FOLDER}/simple/: {', '.join(names) or 'nothing to choose from'}"
        )
        for note in published.notes:
            reporter.line(f"  {note}")
    state = "written" if published.changed else "unchanged (same wheels)"
    reporter.result(f"index {published.root} -> {published.generation.name}: {state}")
    return 0


def cmd_install_command(args: argparse.Namespace) -> int:
    from toolchain.detect.host import detect_host
    from toolchain.options import publish_options
    from toolchain.publish.install_command import plan_install, plan_uv_install
    from toolchain.targets import load_catalog
    from toolchain.util import run
    from toolchain.util.index_env import secret_indexes_to_env, with_env
    from toolchain.util.pip_config import python_prefix, read_pip_config

    options = publish_options(settings_values(args))
    index_dir = options.index_dir
    if not args.index and not (index_dir / "variants.json").is_file():
        what = "no index" if not index_dir.exists() else "no index written by publish"
        raise UsageError(
            f"{what} at {index_dir} (no variants.json)",
            hint="publish one (nox -s publish -- --index-dir DIR) or give --index URL",
        )
    if not args.python.is_file():
        raise UsageError(
            f"--python {args.python}: no such file", hint="give the python to install into"
        )
    index = checked_url(args.index, "--index") if args.index else index_dir.absolute().as_uri()
    common: dict[str, Any] = {
        "project": args.package,
        "version": args.version,
        "python": args.python,
        "public_index": options.index_url,
        "sources": options.sources,
        "pip_config": read_pip_config(os.environ, python_prefix(args.python)),
    }
    isa = detect_host().isa
    catalog = load_catalog(options.recipes)
    if args.installer == "uv":
        plan = plan_uv_install(index, isa, uv=_find_uv(), catalog=catalog, **common)
    else:
        plan = plan_install(index, isa, catalog=catalog, **common)
    print(redact(plan.render()))
    if args.run:
        log = options.work_dir / "install.log"
        for command in plan.commands:
            argv, extra = secret_indexes_to_env(command, uv=args.installer == "uv")
            env = with_env(os.environ, extra)
            run.run_logged(argv, log=log, env=env, what=f"{args.installer} install")
        print(f"installed {plan.chosen.filename} (log: {log})")
    return 0


def _find_uv() -> str:
    """uv on PATH, or beside this Python (a venv's bin/ that is not on PATH)."""
    beside = Path(sys.executable).parent / "uv"
    found = shutil.which("uv") or (str(beside) if beside.is_file() else None)
    if found is None:
        raise ToolMissingError(
            "uv is not installed (on PATH or beside this Python)",
            hint="pip install 'uv>=0.13' (0.13 reads variants), or --installer pip",
        )
    return found


def configure_parser(commands: Any) -> None:
    publish = commands.add_parser(
        "publish", help="write the per-variant static index; with --upload, send to a server"
    )
    add_setting_flags(publish, "publish")
    add_output_flags(publish)
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
    install.add_argument(
        "--installer",
        choices=["pip", "uv"],
        default="pip",
        help="pip: the per-ISA index; uv: the wheel-variants index (publish --wheel-variants), "
        "uv choosing the variant (preview feature)",
    )
    add_setting_flags(install, "install-command")
    install.set_defaults(handler=cmd_install_command)
