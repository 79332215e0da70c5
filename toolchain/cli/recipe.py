"""`new-recipe`: a recipe for a vLLM release, written from its sdist; `learn-prune`: a target's
oneDNN prune list, learned from its finished build."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.cli.common import existing_file, recipe_from_values, settings_values
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


def cmd_learn_prune(args: argparse.Namespace) -> int:
    from toolchain.compile.learn_prune import PruneRequest, learn_prune
    from toolchain.options import work_dir
    from toolchain.targets import default_recipes_dir

    values = settings_values(args)
    if not values["target"]:
        raise UsageError("learn-prune needs --target: the build to learn from")
    recipes_dir = Path(values["recipes"]) if values["recipes"] else default_recipes_dir()
    request = PruneRequest(
        recipe=recipe_from_values(values),
        recipes_dir=recipes_dir,
        target=values["target"],
        arch=values["arch"],
        python=values["python"],
        work_dir=work_dir(values),
        libraries=tuple(args.library or ()),
        to=args.to,
    )
    outcome = learn_prune(request)
    learned = outcome.learned
    reporter.line(
        f"relinked {', '.join(learned.libraries)}: {len(learned.left_out)} of {learned.units} "
        f"oneDNN units are never linked, {learned.kept} kept"
    )
    reporter.line(f"wrote {outcome.path}")
    if outcome.entry is None:
        reporter.line("the recipe's [[onednn_prune]] entry names this file: check its reason")
    elif any(p.applies_to(values["target"], outcome.arch) for p in request.recipe.onednn_prune):
        reporter.line(
            f"put in place of the recipe's [[onednn_prune]] entry for {values['target']} on "
            f"{outcome.arch} (vllm-{request.recipe.vllm}.toml):"
        )
        print(outcome.entry)
    else:
        reporter.line(f"add to the recipe (vllm-{values['vllm'] or 'VERSION'}.toml):")
        print(outcome.entry)
    return 0


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
    learn = commands.add_parser(
        "learn-prune",
        help="list the oneDNN units a finished build's kernel libraries never link (the "
        "recipe's [[onednn_prune]] file)",
    )
    learn.add_argument(
        "--library",
        action="append",
        help="a kernel library to relink, as build.ninja names it (repeat; default: every "
        "shared library that links libdnnl.a)",
    )
    learn.add_argument(
        "--to",
        type=Path,
        help="the list file to write (default: the one the recipe names, else "
        "RECIPES/onednn-prune/vllm-VERSION-ARCH-TARGET.txt)",
    )
    add_setting_flags(learn, "learn-prune")
    # the shared flags' help speaks of a build to plan; here they name a finished one
    helps = {
        "target": "the target of the finished build to learn from (required) [VCB_TARGET]",
        "python": "its Python version, when the work folder holds builds for several "
        "(default: the one build there) [VCB_PYTHON]",
    }
    for action in learn._actions:
        action.help = helps.get(action.dest, action.help)
    learn.set_defaults(handler=cmd_learn_prune)
