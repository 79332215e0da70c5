"""Find scripts that start a vLLM engine while being imported by a spawned child.

vLLM's CPU backend always uses the `spawn` start method: every worker imports the user's script
anew, so an engine created at import time (outside `if __name__ == "__main__":`) starts again in
each child and the run dies in multiprocessing's bootstrapping check. Read with `ast`, not regex,
in one pass over the tree plus one over the calls between the script's own functions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Names, as imported from vllm, whose call starts an engine (or whose from_* constructors do).
ENGINE_NAMES = frozenset({"LLM", "LLMEngine", "AsyncLLMEngine", "AsyncLLM"})
ENGINE_MODULE = "vllm"
RUNS_CODE = frozenset({"exec", "eval"})
Function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


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


def _main_guard(node: ast.AST) -> str | None:
    """'==' for `if __name__ == "__main__":`, '!=' for its negation, else None."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return None
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq | ast.NotEq):
        return None
    sides = [test.left, *test.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    texts = {s.value for s in sides if isinstance(s, ast.Constant)}
    if names != {"__name__"} or texts != {"__main__"}:
        return None
    return "==" if isinstance(test.ops[0], ast.Eq) else "!="


def _defaults(function: Function) -> list[ast.AST]:
    """What a def or lambda evaluates when it is defined: decorators and default values."""
    args = function.args
    found: list[ast.AST] = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    if not isinstance(function, ast.Lambda):
        found += function.decorator_list
    return found


def runs(nodes: Sequence[ast.AST]) -> Iterator[ast.AST]:
    """Every node that runs when `nodes` run: not the bodies of functions and lambdas defined
    there (only their decorators and defaults), not the branch a __main__ guard protects."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        yield node
        guard = _main_guard(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            children = _defaults(node)
        elif guard is not None and isinstance(node, ast.If):
            children = [node.test, *(node.orelse if guard == "==" else node.body)]
        else:
            children = list(ast.iter_child_nodes(node))
        stack.extend(reversed(children))


def _dotted(node: ast.expr) -> str:
    """`a.b.c` for a name or an attribute chain, '' for anything else (iterative: deep chains)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return "." + ".".join(reversed(parts)) if parts else ""
    return ".".join([node.id, *reversed(parts)])


@dataclass
class _Names:
    """Local names bound to vllm modules and to engine classes, anywhere in the script."""

    modules: set[str] = field(default_factory=set)
    engines: set[str] = field(default_factory=set)

    def add(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self.modules |= {
                    alias.asname or alias.name.split(".")[0]
                    for alias in node.names
                    if alias.name.split(".")[0] == ENGINE_MODULE
                }
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == (
                ENGINE_MODULE
            ):
                for alias in node.names:
                    if alias.name == "*":
                        self.engines |= ENGINE_NAMES
                    elif alias.name in ENGINE_NAMES:
                        self.engines.add(alias.asname or alias.name)


class _Script:
    def __init__(self, tree: ast.Module) -> None:
        self.names = _Names()
        self.names.add(tree)
        self.functions = _module_functions(tree)
        self.starting: set[str] = set()
        self.starting = self._starting_functions()

    def _getattr_engine(self, node: ast.expr) -> bool:
        """`getattr(vllm, "LLM")` (or of an engine class) as the callee, or the base of one."""
        while isinstance(node, ast.Attribute):
            node = node.value
        if not (isinstance(node, ast.Call) and _dotted(node.func) == "getattr"):
            return False
        args = node.args
        return (
            len(args) >= 2
            and isinstance(args[1], ast.Constant)
            and (args[1].value in ENGINE_NAMES or str(args[1].value).startswith("from_"))
            and _dotted(args[0]).split(".")[0] in self.names.modules | self.names.engines
        )

    def is_engine_call(self, call: ast.Call) -> bool:
        parts = _dotted(call.func).split(".")
        if parts[0] in self.names.engines or self._getattr_engine(call.func):
            return True
        if parts[0] in self.names.modules and any(p in ENGINE_NAMES for p in parts[1:]):
            return True
        if len(parts) == 1 and parts[0] in RUNS_CODE:
            return self._code_starts(call)
        return len(parts) == 1 and parts[0] in self.starting

    def _code_starts(self, call: ast.Call) -> bool:
        """exec/eval of a literal string that starts an engine when run."""
        if not call.args or not isinstance(call.args[0], ast.Constant):
            return False
        try:
            inner = ast.parse(str(call.args[0].value))
        except (SyntaxError, ValueError):
            return False
        self.names.add(inner)
        return bool(self.starts_in(inner.body))

    def starts_in(self, nodes: Sequence[ast.AST]) -> list[ast.Call]:
        return [n for n in runs(nodes) if isinstance(n, ast.Call) and self.is_engine_call(n)]

    def _starting_functions(self) -> set[str]:
        """The script's functions that start an engine when called, directly or through others:
        one walk of each body, then a breadth-first pass over who calls whom (linear)."""
        callers: dict[str, set[str]] = {name: set() for name in self.functions}
        queue = []
        for name, function in self.functions.items():
            body = function.body if isinstance(function.body, list) else [function.body]
            direct = False
            for node in runs(body):
                if not isinstance(node, ast.Call):
                    continue
                callee = _dotted(node.func)
                if callee in callers:
                    callers[callee].add(name)
                elif not direct and self.is_engine_call(node):
                    direct = True
            if direct:
                queue.append(name)
        starting = set(queue)
        while queue:
            for caller in callers[queue.pop()] - starting:
                starting.add(caller)
                queue.append(caller)
        return starting


def _module_functions(tree: ast.Module) -> dict[str, Function]:
    """Functions a module defines at its top: `def`s and `name = lambda ...`."""
    functions: dict[str, Function] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions[node.name] = node
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Lambda)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            functions[node.targets[0].id] = node.value
    return functions


def lint_script(path: Path) -> list[Finding]:
    """Engine starts at import time; SyntaxError or ValueError when `path` is not Python."""
    # bytes, so a PEP 263 coding line decides the encoding, as for Python itself
    tree = ast.parse(path.read_bytes(), filename=str(path))
    script = _Script(tree)
    calls = sorted(script.starts_in(tree.body), key=lambda call: (call.lineno, call.col_offset))
    return [
        Finding(path=str(path), line=call.lineno, call=f"{_dotted(call.func) or 'getattr'}(...)")
        for call in calls
    ]
