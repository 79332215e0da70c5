"""`bench`'s figures: tok/s of each side per dtype and prompt shape, the spread over the rounds,
the ratio, and whether a difference is inside the noise.

The noise is judged from the pair ratios: each round ran both sides back to back, so A/B of one
round shares the machine's state of that moment. When the pair ratios of the rounds reach from
below 1.0 to above it, the run cannot tell the two sides apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SHAPES = ("batch", "single")
DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16"}


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """tok/s of one engine run: one side, one dtype, one round; by shape (batch, single)."""

    round: int
    side: str  # "A" or "B"
    dtype: str
    tokens_per_second: dict[str, float]


@dataclass(frozen=True, kw_only=True)
class Spread:
    """The median of some figures and their range."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no figures to summarize")
        return cls(
            median=statistics.median(values), low=min(values), high=max(values), count=len(values)
        )

    def text(self, digits: int = 1) -> str:
        if self.count == 1:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}-{self.high:.{digits}f})"


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One row of the table: a dtype and shape, both sides, and how they compare."""

    dtype: str
    shape: str
    a: Spread
    b: Spread | None = None
    ratio: float | None = None  # median A over median B
    pairs: Spread | None = None  # A/B of each round

    @property
    def verdict(self) -> str:
        if self.pairs is None:
            return ""
        if self.pairs.count < 2:
            return "one round: no noise estimate"
        if self.pairs.low <= 1.0 <= self.pairs.high:
            return "inside the noise"
        return "A faster" if self.pairs.low > 1.0 else "A slower"

    def to_json(self) -> dict[str, Any]:
        def spread(value: Spread | None) -> dict[str, float] | None:
            if value is None:
                return None
            return {"median": value.median, "min": value.low, "max": value.high}

        return {
            "dtype": self.dtype,
            "shape": self.shape,
            "a_tokens_per_second": spread(self.a),
            "b_tokens_per_second": spread(self.b),
            "ratio": self.ratio,
            "pair_ratios": spread(self.pairs),
            "verdict": self.verdict,
        }


def summarize(measurements: Sequence[Measurement], dtypes: Sequence[str]) -> list[Cell]:
    """A cell per dtype and shape, in that order; B's figures and the ratios when B ran."""
    cells = []
    for dtype in dtypes:
        for shape in SHAPES:
            a = _by_round(measurements, "A", dtype, shape)
            b = _by_round(measurements, "B", dtype, shape)
            if not b:
                cells.append(Cell(dtype=dtype, shape=shape, a=Spread.of(list(a.values()))))
                continue
            pairs = [a[r] / b[r] for r in sorted(a.keys() & b.keys()) if b[r] > 0]
            a_spread, b_spread = Spread.of(list(a.values())), Spread.of(list(b.values()))
            cells.append(
                Cell(
                    dtype=dtype,
                    shape=shape,
                    a=a_spread,
                    b=b_spread,
                    ratio=a_spread.median / b_spread.median if b_spread.median > 0 else None,
                    pairs=Spread.of(pairs) if pairs else None,
                )
            )
    return cells


def _by_round(
    measurements: Sequence[Measurement], side: str, dtype: str, shape: str
) -> dict[int, float]:
    return {
        m.round: m.tokens_per_second[shape]
        for m in measurements
        if m.side == side and m.dtype == dtype and shape in m.tokens_per_second
    }


def render(cells: Sequence[Cell], *, shapes: dict[str, str]) -> str:
    """The table: median tok/s with the range over the rounds, the ratio and the verdict."""
    compare = any(cell.b is not None for cell in cells)
    head = ["dtype", "prompts", "A tok/s (min-max)"]
    if compare:
        head += ["B tok/s (min-max)", "A/B", "A/B per round", "verdict"]
    rows = [head]
    for cell in cells:
        row = [DTYPE_NAMES.get(cell.dtype, cell.dtype), shapes[cell.shape], cell.a.text()]
        if compare:
            row += [
                cell.b.text() if cell.b else "-",
                f"{cell.ratio:.2f}" if cell.ratio is not None else "-",
                cell.pairs.text(2) if cell.pairs else "-",
                cell.verdict,
            ]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
