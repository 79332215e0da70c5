"""Find scripts that start a vLLM engine while being imported by a spawned child.

vLLM's CPU backend always uses the `spawn` start method: every worker imports the user's script
anew, so an engine created at import time (outside `if __name__ == "__main__":`) starts again in
each child and the run dies in multiprocessing's bootstrapping check. Read with `ast`, not regex.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# Names, as imported from vllm, whose call starts an engine (or whose from_* constructors do).
ENGINE_NAMES = frozenset({"LLM", "LLMEngine", "AsyncLLMEngine", "AsyncLLM"})
ENGINE_MODULE = "vllm"


@dataclass(frozen=True, kw_only=True)
class Finding:
    path: str
    line: int
    call: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.call} runs when the script is imported; vLLM's "
            "CPU workers are started with spawn and import it again. Move it into a function "
            'called under `if __name__ == "__main__":`'
        )


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    texts = {s.value for s in sides if isinstance(s, ast.Constant)}
    return names == {"__name__"} and texts == {"__main__"}


class _Imports(ast.NodeVisitor):
    """Local names bound to vllm modules and to engine classes."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.engines: set[str] = set()

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == ENGINE_MODULE or alias.name.startswith(ENGINE_MODULE + "."):
                self.modules.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module == ENGINE_MODULE or module.startswith(ENGINE_MODULE + "."):
            for alias in node.names:
                if alias.name in ENGINE_NAMES:
                    self.engines.add(alias.asname or alias.name)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


class _Script:
    def __init__(self, tree: ast.Module) -> None:
        imports = _Imports()
        imports.visit(tree)
        self.imports = imports
        self.functions = {
            node.name: node
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        self.starting: set[str] = set()
        changed = True
        while changed:  # functions that start an engine, directly or through local functions
            changed = False
            for name, function in self.functions.items():
                if name not in self.starting and self._first_start(function.body):
                    self.starting.add(name)
                    changed = True

    def is_engine_call(self, call: ast.Call) -> bool:
        parts = _dotted(call.func).split(".")
        if parts[0] in self.imports.engines:
            return True
        if parts[0] in self.imports.modules and any(p in ENGINE_NAMES for p in parts[1:]):
            return True
        return len(parts) == 1 and parts[0] in self.starting

    def _first_start(self, body: list[ast.stmt]) -> ast.Call | None:
        for statement in body:
            if _is_main_guard(statement):
                continue
            for node in ast.walk(statement):
                if isinstance(node, ast.Call) and self.is_engine_call(node):
                    return node
        return None

    def import_time_starts(self, body: list[ast.stmt]) -> list[ast.Call]:
        """Engine starts in statements that run on import: module and class bodies."""
        found = []
        for statement in body:
            if _is_main_guard(statement) or isinstance(
                statement, ast.FunctionDef | ast.AsyncFunctionDef
            ):
                continue
            if isinstance(statement, ast.ClassDef):
                found += self.import_time_starts(statement.body)
                continue
            found += [
                node
                for node in ast.walk(statement)
                if isinstance(node, ast.Call) and self.is_engine_call(node)
            ]
        return found


def lint_script(path: Path) -> list[Finding]:
    tree = ast.parse(path.read_text(), filename=str(path))
    script = _Script(tree)
    return [
        Finding(path=str(path), line=call.lineno, call=f"{_dotted(call.func)}(...)")
        for call in script.import_time_starts(tree.body)
    ]
