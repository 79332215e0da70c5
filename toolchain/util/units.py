"""Sizes in the units people read."""

from __future__ import annotations

KIB = 1024


MIB = 1024**2


GIB = 1024**3


def gib(value: int | None) -> str:
    return "none" if value is None else f"{value / GIB:.2f} GiB"
