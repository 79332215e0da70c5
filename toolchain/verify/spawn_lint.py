"""Find scripts that start a vLLM engine while being imported by a spawned child.

vLLM's CPU backend always uses the `spawn` start method: every worker imports the user's script
anew, so an engine created at import time (outside `if __name__ == "__main__":`) starts again in
each child and the run dies in multiprocessing's bootstrapping check. Read with `ast`, not regex,
in one pass over the tree plus one over the calls between the script's own functions.
"""

from __future__ import annotations

import ast
import bisect
import io
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.errors import UsageError

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


@dataclass(frozen=True, kw_only=True)
class _Call:
    """What lint needs of one call, so a statement's tree can be dropped once it is read."""

    line: int
    callee: str  # `a.b.c`, or '' when the callee is not a name chain
    getattr_of: str = ""  # X of `getattr(X, "LLM")(...)` (or of `getattr(X, "from_...")`)
    code: str | None = None  # the literal that exec/eval runs


def _describe(call: ast.Call, offset: int) -> _Call:
    callee, node = _dotted(call.func), call.func
    while isinstance(node, ast.Attribute):
        node = node.value
    getattr_of = ""
    if isinstance(node, ast.Call) and _dotted(node.func) == "getattr" and len(node.args) >= 2:
        name = node.args[1]
        if isinstance(name, ast.Constant) and (
            name.value in ENGINE_NAMES or str(name.value).startswith("from_")
        ):
            getattr_of = _dotted(node.args[0]) or "?"
    code = None
    if callee in RUNS_CODE and call.args and isinstance(call.args[0], ast.Constant):
        code = str(call.args[0].value)
    return _Call(line=call.lineno + offset, callee=callee, getattr_of=getattr_of, code=code)


def _calls(nodes: Sequence[ast.AST], offset: int) -> list[_Call]:
    return [_describe(node, offset) for node in runs(nodes) if isinstance(node, ast.Call)]


@dataclass
class _Script:
    """What a script does at import time and what each of its top-level functions calls."""

    names: _Names = field(default_factory=_Names)
    functions: dict[str, list[_Call]] = field(default_factory=dict)
    at_import: list[_Call] = field(default_factory=list)
    starting: set[str] = field(default_factory=set)

    def read(self, tree: ast.Module, offset: int = 0, *, imports_vllm: bool = True) -> None:
        """Take in one top-level statement (or several); its tree is not kept."""
        if imports_vllm:  # a batch whose text never says vllm imports nothing from it
            self.names.add(tree)
        functions = _module_functions(tree)
        for name, function in functions.items():
            body = function.body if isinstance(function.body, list) else [function.body]
            self.functions[name] = _calls(body, offset)
        self.at_import += _calls(tree.body, offset)

    def is_engine_call(self, call: _Call) -> bool:
        parts = call.callee.split(".")
        if parts[0] in self.names.engines:
            return True
        if call.getattr_of.split(".")[0] in self.names.modules | self.names.engines:
            return True
        if parts[0] in self.names.modules and any(p in ENGINE_NAMES for p in parts[1:]):
            return True
        if call.code is not None:
            return self._code_starts(call.code)
        return len(parts) == 1 and parts[0] in self.starting

    def _code_starts(self, code: str) -> bool:
        """exec/eval of a literal string that starts an engine when run."""
        try:
            inner = ast.parse(code)
        except (SyntaxError, ValueError):
            return False
        self.names.add(inner)
        return any(self.is_engine_call(call) for call in _calls(inner.body, 0))

    def find_starting(self) -> None:
        """The script's functions that start an engine when called, directly or through others:
        one look at each function's calls, then a breadth-first pass over who calls whom."""
        callers: dict[str, set[str]] = {name: set() for name in self.functions}
        queue = []
        for name, calls in self.functions.items():
            direct = False
            for call in calls:
                if call.callee in callers:
                    callers[call.callee].add(name)
                elif not direct and self.is_engine_call(call):
                    direct = True
            if direct:
                queue.append(name)
        self.starting = set(queue)
        while queue:
            for caller in callers[queue.pop()] - self.starting:
                self.starting.add(caller)
                queue.append(caller)


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


# A line at column 0 may start a new top-level statement unless it continues the one before.
CONTINUES = ("else", "elif", "except", "finally", ")", "]", "}", "#")
BATCH_LINES = 1000  # parsed at once: few parser calls, one batch's tree in memory


def statements(text: str) -> Iterator[tuple[int, ast.Module, str]]:
    """(line offset, tree, text) of the script's top-level statements, about BATCH_LINES lines
    at a time, so memory holds one batch's tree and not the whole file's. A split that does not
    parse (inside a string, after a decorator) is widened, doubling each time: linear work."""
    lines = text.splitlines(keepends=True)
    candidates = [
        index
        for index, line in enumerate(lines)
        if index
        and line[:1] not in ("", " ", "\t", "\n", "\r", "\f")
        and not line.startswith(CONTINUES)
    ] + [len(lines)]
    last, start = len(candidates) - 1, 0
    while start < len(lines):
        width = BATCH_LINES
        while True:
            end = candidates[min(bisect.bisect_left(candidates, start + width), last)]
            batch = "".join(lines[start:end])
            try:
                tree = ast.parse(batch)
                break
            except SyntaxError as exc:
                if end >= len(lines):
                    exc.lineno = (exc.lineno or 0) + start
                    raise
                width = (end - start) * 2
        yield start, tree, batch
        start = end


def _source(path: Path) -> str:
    """The script's text in the encoding a PEP 263 coding line names (UTF-8 by default)."""
    data = path.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def lint_scripts(paths: Sequence[Path]) -> list[Finding]:
    """Findings of every script; a usage error naming the first that is not readable Python."""
    findings = []
    for path in paths:
        try:
            findings += lint_script(path)
        except (OSError, SyntaxError, ValueError, RecursionError) as exc:
            raise UsageError(f"cannot read {path} as Python: {exc}") from exc
    return findings


def lint_script(path: Path) -> list[Finding]:
    """Engine starts at import time; SyntaxError or ValueError when `path` is not Python."""
    script = _Script()
    for offset, tree, text in statements(_source(path)):
        script.read(tree, offset, imports_vllm=ENGINE_MODULE in text)
    script.find_starting()
    return [
        Finding(path=str(path), line=call.line, call=f"{call.callee or 'getattr'}(...)")
        for call in sorted(script.at_import, key=lambda call: call.line)
        if script.is_engine_call(call)
    ]
