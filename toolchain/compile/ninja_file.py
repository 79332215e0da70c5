"""The build statements of a `build.ninja`, as CMake's Ninja generator writes them: which
outputs each makes, by which rule, from which explicit, implicit and order-only inputs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CONTINUED = re.compile(r"\$\n[ \t]*")  # `$` at a line's end: the statement goes on
TOKEN = re.compile(r"(?:\$.|[^\s$])+")  # a path, with `$ `, `$:` and `$$` escapes inside
ESCAPE = re.compile(r"\$(.)")


@dataclass(frozen=True, kw_only=True)
class NinjaBuild:
    outputs: tuple[str, ...]
    rule: str
    inputs: tuple[str, ...]  # explicit: what the rule's $in names (a link's objects)
    implicit: tuple[str, ...]  # after `|`: also needed (a library a link takes by its flags)
    order_only: tuple[str, ...]  # after `||`

    def needs(self, path: str) -> bool:
        return path in self.inputs or path in self.implicit


def _unescaped(token: str) -> str:
    return ESCAPE.sub(r"\1", token)


def _statement(line: str) -> NinjaBuild | None:
    tokens = TOKEN.findall(line.removeprefix("build "))
    end = next((i for i, t in enumerate(tokens) if t.endswith(":") and not t.endswith("$:")), None)
    if end is None or end + 1 >= len(tokens):
        return None
    outputs = [*tokens[:end], tokens[end][:-1]]
    groups: list[list[str]] = [[], [], []]
    group = 0
    for token in tokens[end + 2 :]:
        if token in ("|", "||"):
            group = 1 if token == "|" else 2
        else:
            groups[group].append(_unescaped(token))
    return NinjaBuild(
        outputs=tuple(_unescaped(out) for out in outputs if out and out != "|"),
        rule=tokens[end + 1],
        inputs=tuple(groups[0]),
        implicit=tuple(groups[1]),
        order_only=tuple(groups[2]),
    )


def read_builds(text: str) -> list[NinjaBuild]:
    """Every `build` statement of a ninja file's text (its variables and rules are not read)."""
    found = []
    for line in CONTINUED.sub("", text).splitlines():
        statement = _statement(line) if line.startswith("build ") else None
        if statement is not None:
            found.append(statement)
    return found


def read_build_file(path: Path) -> list[NinjaBuild]:
    return read_builds(path.read_text(errors="replace"))
