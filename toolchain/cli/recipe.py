"""`new-recipe`: a recipe for a vLLM release, written from its sdist."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.cli.common import existing_file, settings_values
from toolchain.errors import UsageError
from toolchain.settings import PYPI_SIMPLE, add_setting_flags
from toolchain.util.report import reporter
from toolchain.util.urls import checked_url

if TYPE_CHECKING:
    from packaging.version import Version

    from toolchain.recipegen.new_recipe import Generated


def cmd_new_recipe(args: argparse.Namespace) -> int:
    from toolchain.compile.sources import fetch_new_sdist
    from toolchain.options import work_dir
    from toolchain.recipegen.new_recipe import generate, refuse_existing, write_recipe
    from toolchain.targets import default_recipes_dir
    from toolchain.util.files import sha256_file

    values = settings_values(args)
    version = _version(args.vllm)
    recipes_dir = Path(values["recipes"]) if values["recipes"] else default_recipes_dir()
    to = args.to or recipes_dir
    refuse_existing(to / f"vllm-{version}.toml", force=args.force)  # before a 50 MB download
    if args.sdist is not None:
        sdist, sha256 = args.sdist, sha256_file(args.sdist)
        reporter.warning(
            f"{sdist}: its sha256 {sha256} is the file's own, checked against no index"
        )
    else:
        sdist, sha256 = fetch_new_sdist(
            sdist=f"vllm-{version}.tar.gz",
            cache_root=work_dir(values) / "sdists",
            index_url=checked_url(values["index_url"] or PYPI_SIMPLE, "--index-url"),
        )
    generated = generate(version, sdist, sha256, recipes_dir)
    path = write_recipe(generated, to, force=args.force)
    _report(generated, path)
    return 0


def _version(value: str) -> Version:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(value)
    except InvalidVersion as exc:
        raise UsageError(f"--vllm {value}: not a version") from exc


def _report(generated: Generated, path: Path) -> None:
    for run in generated.dry_runs:
        state = "applies" if run.applies else "does NOT apply"
        reporter.line(f"patch --dry-run {run.patch.name}: {state}")
        for failure in run.failures:
            reporter.line(f"    {failure}")
    for note in generated.notes:
        reporter.warning(note)
    reporter.line(f"wrote {path}: review it against its neighbours (recipes/README.md)")


def configure_parser(commands: Any) -> None:
    new = commands.add_parser(
        "new-recipe", help="write vllm-VERSION.toml from the release's sdist (needs the index)"
    )
    new.add_argument("--vllm", required=True, help="the vLLM release (as on PyPI)")
    new.add_argument("--to", type=Path, help="folder to write into (default: the recipes folder)")
    new.add_argument("--force", action="store_true", help="overwrite an existing recipe")
    new.add_argument(
        "--sdist",
        type=existing_file,
        help="read this sdist (.tar.gz) instead of fetching it; its hash is then checked "
        "against no index",
    )
    add_setting_flags(new, "new-recipe")
    new.set_defaults(handler=cmd_new_recipe)
