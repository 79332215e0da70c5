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
IMPORTERS = frozenset(
    {"__import__", "builtins.__import__", "import_module", "importlib.import_module"}
)
PARTIALS = frozenset({"partial", "functools.partial"})
IMPORTED = "import_module('vllm')"  # the root of a path to a vllm module imported by name
Function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


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


def _is_main_test(node: ast.expr, op: type[ast.cmpop]) -> bool:
    """`__name__ == "__main__"` (op Eq) or `__name__ != "__main__"` (op NotEq), either side."""
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return False
    sides = [node.left, *node.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    texts = {s.value for s in sides if isinstance(s, ast.Constant)}
    return isinstance(node.ops[0], op) and names == {"__name__"} and texts == {"__main__"}


def _true_only_in_main(test: ast.expr) -> bool:
    """The test can hold only in the main script: `__name__ == "__main__" and ...` and kin."""
    if isinstance(test, ast.BoolOp):
        check = any if isinstance(test.op, ast.And) else all
        return check(_true_only_in_main(value) for value in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _false_only_in_main(test.operand)
    return _is_main_test(test, ast.Eq)


def _false_only_in_main(test: ast.expr) -> bool:
    """The test can fail only in the main script: `__name__ != "__main__" or ...` and kin."""
    if isinstance(test, ast.BoolOp):
        check = any if isinstance(test.op, ast.Or) else all
        return check(_false_only_in_main(value) for value in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _true_only_in_main(test.operand)
    return _is_main_test(test, ast.NotEq)


def _branches(node: ast.If | ast.IfExp) -> list[ast.AST]:
    """The test and the branches of an `if` a spawned child can take."""
    body = node.body if isinstance(node.body, list) else [node.body]
    orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
    children: list[ast.AST] = [node.test]
    children += [] if _true_only_in_main(node.test) else body
    children += [] if _false_only_in_main(node.test) else orelse
    return children


def _defaults(function: Function) -> list[ast.AST]:
    """What a def or lambda evaluates when it is defined: decorators and default values."""
    args = function.args
    found: list[ast.AST] = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    if not isinstance(function, ast.Lambda):
        found += function.decorator_list
    return found


def _called_lambdas(node: ast.Call | Definition) -> list[ast.AST]:
    """Bodies of lambdas called where they stand: `(lambda: ...)()` and lambda decorators."""
    called = [node.func] if isinstance(node, ast.Call) else node.decorator_list
    return [function.body for function in called if isinstance(function, ast.Lambda)]


def runs(nodes: Sequence[ast.AST]) -> Iterator[ast.AST]:
    """Every node that runs when `nodes` run in a spawned child: not the bodies of functions
    and lambdas defined there (only their decorators and defaults, and the body of a lambda
    called on the spot), not a branch only the main script takes."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            children = _defaults(node) + _called_lambdas(node)
        elif isinstance(node, ast.Lambda):
            children = _defaults(node)
        elif isinstance(node, ast.If | ast.IfExp):
            children = _branches(node)
        elif isinstance(node, ast.Call | ast.ClassDef):
            children = list(ast.iter_child_nodes(node)) + _called_lambdas(node)
        else:
            children = list(ast.iter_child_nodes(node))
        stack.extend(reversed(children))


def _chain(node: ast.expr) -> str:
    """`a.b.c` for a name or a chain of attributes of one, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _imported_name(call: ast.Call) -> str:
    """The module `__import__("...")` or `importlib.import_module("...")` imports, else ''."""
    if _chain(call.func) not in IMPORTERS:
        return ""
    named = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "name")]
    texts = [node.value for node in named if isinstance(node, ast.Constant)]
    return texts[0] if texts and isinstance(texts[0], str) else ""


def _path(node: ast.expr) -> str:
    """What an expression names, as a dotted path: `a.b.c`; `getattr(a, "b")` as `a.b`;
    `functools.partial(f, ...)` as `f` (calling it calls f); a vllm module imported by name
    as IMPORTED; '' for anything else. A loop, not recursion: chains can be deep."""
    parts: list[str] = []
    while not isinstance(node, ast.Name):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
            continue
        if not isinstance(node, ast.Call):
            return ""
        function, args = _chain(node.func), node.args
        if function == "getattr" and len(args) >= 2 and isinstance(args[1], ast.Constant):
            parts.append(str(args[1].value))
            node = args[0]
        elif function in PARTIALS and args:
            node = args[0]
        elif _imported_name(node).split(".")[0] == ENGINE_MODULE:
            return ".".join([IMPORTED, *reversed(parts)])
        else:
            return ""
    return ".".join([node.id, *reversed(parts)])


@dataclass
class _Names:
    """Local names bound to vllm modules, to engine classes and to other names, anywhere in
    the script (scopes are not told apart: a name bound anywhere counts everywhere)."""

    modules: set[str] = field(default_factory=set)
    engines: set[str] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)  # `E = vllm.LLM`: E -> vllm.LLM

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
                    else:  # an engine class, or a submodule such as `from vllm import entrypoints`
                        kind = self.engines if alias.name in ENGINE_NAMES else self.modules
                        kind.add(alias.asname or alias.name)

    def bind(self, node: ast.Assign | ast.AnnAssign | ast.NamedExpr) -> None:
        """Remember `name = <path>` (and `a, b = <path>, <path>`) for later look-ups."""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            pairs: list[tuple[ast.expr, ast.expr | None]] = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=False))
            for name, value in pairs:
                path = _path(value) if value is not None else ""
                if isinstance(name, ast.Name) and path and path != name.id:
                    self.aliases.setdefault(name.id, path)

    def resolve(self, path: str) -> str:
        """`path` with its first name replaced by what it is bound to, until it is not bound."""
        seen = set()
        head, _, rest = path.partition(".")
        while head in self.aliases and head not in seen:
            seen.add(head)
            path = self.aliases[head] + ("." + rest if rest else "")
            head, _, rest = path.partition(".")
        return path


@dataclass(frozen=True, kw_only=True)
class _Call:
    """What lint needs of one call, so a statement's tree can be dropped once it is read."""

    line: int
    callee: str  # a path (see `_path`), or '' when the callee is not one
    code: str | None = None  # the literal that exec/eval runs


def _describe(call: ast.Call, offset: int) -> _Call:
    callee = _path(call.func)
    code = None
    if callee in RUNS_CODE and call.args and isinstance(call.args[0], ast.Constant):
        code = str(call.args[0].value)
    return _Call(line=call.lineno + offset, callee=callee, code=code)


def _decorator_calls(node: Definition, offset: int) -> list[_Call]:
    """A decorator is called with what it decorates, when the def or class runs."""
    paths = [(_path(d), d.lineno) for d in node.decorator_list]
    return [_Call(line=line + offset, callee=path) for path, line in paths if path]


def _calls(nodes: Sequence[ast.AST], offset: int, names: _Names) -> list[_Call]:
    """The calls that run when `nodes` run; the names they bind go into `names`."""
    calls = []
    for node in runs(nodes):
        if isinstance(node, ast.Call):
            calls.append(_describe(node, offset))
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr):
            names.bind(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            calls += _decorator_calls(node, offset)
    return calls


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
            self.functions[name] = _calls(body, offset, self.names)
        self.at_import += _calls(tree.body, offset, self.names)

    def is_engine_call(self, call: _Call) -> bool:
        if call.code is not None:
            return self._code_starts(call.code)
        parts = self.names.resolve(call.callee).split(".")
        if parts[0] in self.names.engines:
            return True
        if parts[0] in self.names.modules | {IMPORTED}:
            return any(part in ENGINE_NAMES for part in parts[1:])
        return len(parts) == 1 and parts[0] in self.starting

    def _code_starts(self, code: str) -> bool:
        """exec/eval of a literal string that starts an engine when run."""
        try:
            inner = ast.parse(code)
        except (SyntaxError, ValueError):
            return False
        self.names.add(inner)
        return any(self.is_engine_call(call) for call in _calls(inner.body, 0, self.names))

    def find_starting(self) -> None:
        """The script's functions that start an engine when called, directly or through others:
        one look at each function's calls, then a breadth-first pass over who calls whom."""
        callers: dict[str, set[str]] = {name: set() for name in self.functions}
        queue = []
        for name, calls in self.functions.items():
            direct = False
            for call in calls:
                callee = self.names.resolve(call.callee)
                if callee in callers:
                    callers[callee].add(name)
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
        Finding(path=str(path), line=call.line, call=f"{call.callee or '?'}(...)")
        for call in sorted(script.at_import, key=lambda call: call.line)
        if script.is_engine_call(call)
    ]
