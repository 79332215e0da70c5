"""The code map of docs/development.md holds: each stage imports only what its row allows."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "toolchain"
TOP = {"errors", "settings", "options", "wheelfile", "runtime_deps", "targets"}
# area -> the areas it may import besides itself; "top:NAME" are the top-level modules
EVERY_TOP = {f"top:{name}" for name in TOP}
ALLOWED = {
    "util": {"top:errors"},
    "detect": {"util"} | EVERY_TOP,
    "plan": {"detect", "util"} | EVERY_TOP,
    "compile": {"plan", "detect", "util", "top:__init__"} | EVERY_TOP,
    "emulate": {"util"} | EVERY_TOP,
    "verify": {"detect", "emulate", "util"} | EVERY_TOP,
    "publish": {"plan", "util"} | EVERY_TOP,
    "recipegen": {"plan", "util"} | EVERY_TOP,
    "top": {"util"} | EVERY_TOP,
    # what a build target needs is named in detect's feature names; every stage reads targets
    "top:targets": {"detect", "util"} | EVERY_TOP,
}


def imported_areas(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("toolchain"):
            parts = (node.module or "").split(".")
            if len(parts) == 1:
                found.add("top:__init__")
            else:
                found.add(f"top:{parts[1]}" if parts[1] in TOP else parts[1])
    return found


def test_the_checker_sees_a_forbidden_import() -> None:
    assert imported_areas("from toolchain.compile.steps import STEPS") == {"compile"}
    assert imported_areas("from toolchain.settings import X") == {"top:settings"}


def test_every_stage_imports_only_what_the_code_map_allows() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] in {"cli", "__main__.py"} or "scripts" in parts:
            continue  # the command line may import everything; scripts run in other venvs
        area = parts[0] if len(parts) > 1 else "top"
        allowed = ALLOWED.get(f"top:{path.stem}", ALLOWED[area]) if area == "top" else ALLOWED[area]
        extra = imported_areas(path.read_text()) - allowed - {area}
        if extra:
            wrong.append(f"{path.relative_to(PACKAGE)} imports {sorted(extra)}")
    assert wrong == []
