"""A generated recipe as TOML text, laid out as the hand-written ones are."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

WIDTH = 100


@dataclass(frozen=True, kw_only=True)
class Section:
    """One table or array-of-tables entry: its header, its keys in order, comments above keys."""

    header: str  # "[source]", "[[patches]]", "" for the top-level keys
    keys: Mapping[str, Any]
    comments: Mapping[str, str] = field(default_factory=dict)  # key ("" = the header) -> comment


def value(item: Any, indent: int = 0) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, str):
        return json.dumps(item)
    if isinstance(item, Mapping):
        return "{ " + ", ".join(f"{k} = {value(v)}" for k, v in item.items()) + " }"
    if isinstance(item, Sequence):
        return _array([value(v) for v in item], indent)
    raise TypeError(f"no TOML form for {item!r}")


def _array(items: list[str], indent: int) -> str:
    """A list on one line, or wrapped at WIDTH with its continuation under the first item."""
    one = "[" + ", ".join(items) + "]"
    if indent + len(one) <= WIDTH:
        return one
    lines: list[str] = []
    pad = " " * (indent + 1)
    current = "["
    for index, item in enumerate(items):
        piece = item + ("]" if index == len(items) - 1 else ",")
        sep = "" if current in ("[", pad) else " "
        width = (0 if lines else indent) + len(current) + len(sep) + len(piece)
        if width > WIDTH and current not in ("[", pad):
            lines.append(current)
            current, sep = pad, ""
        current += sep + piece
    return "\n".join([*lines, current])


def comment(text: str) -> list[str]:
    """`# text` wrapped at WIDTH."""
    lines, line = [], "#"
    for word in text.split():
        if len(line) + 1 + len(word) > WIDTH:
            lines.append(line)
            line = "#"
        line += " " + word
    return [*lines, line]


def render(header_comment: str, sections: Sequence[Section]) -> str:
    out = comment(header_comment)
    for section in sections:
        if section.header:
            out.append("")
            out += comment(section.comments[""]) if "" in section.comments else []
            out.append(section.header)
        for key, item in section.keys.items():
            out += comment(section.comments[key]) if key in section.comments else []
            out.append(f"{key} = {value(item, indent=len(key) + 3)}")
    return "\n".join(out) + "\n"
