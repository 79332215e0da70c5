"""`kernel-tests`' findings: each wheel's counts per test file, and every case whose outcome
differs between the two wheels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toolchain.verify.junit import OUTCOMES, Case

# outcome by node id, for each side ("A", "B")
Outcomes = Mapping[str, Mapping[str, Case]]


@dataclass(frozen=True, kw_only=True)
class Difference:
    node_id: str
    cases: dict[str, Case]  # by side

    def to_json(self) -> dict[str, object]:
        return {"node_id": self.node_id, **{s: c.to_json() for s, c in self.cases.items()}}


def file_of(node_id: str) -> str:
    return node_id.partition("::")[0]


def counts(node_ids: Sequence[str], cases: Mapping[str, Case]) -> dict[str, dict[str, int]]:
    """How many of `node_ids` had each outcome, per test file (an outcome no case had: 0)."""
    found: dict[str, dict[str, int]] = {}
    for node_id in node_ids:
        per_file = found.setdefault(file_of(node_id), dict.fromkeys(OUTCOMES, 0))
        per_file[cases[node_id].outcome] += 1
    return found


def differences(node_ids: Sequence[str], outcomes: Outcomes) -> list[Difference]:
    """The cases whose outcome is not the same on every side, in the order they ran; a case one
    side has no result for differs from one it has a result for."""
    sides = list(outcomes)
    found = []
    for node_id in node_ids:
        cases = {side: outcomes[side][node_id] for side in sides}
        if len({case.outcome for case in cases.values()}) > 1:
            found.append(Difference(node_id=node_id, cases=cases))
    return found


def missing(node_ids: Sequence[str], outcomes: Outcomes) -> dict[str, int]:
    """How many cases each side has no result for."""
    return {
        side: sum(cases[n].outcome == "missing" for n in node_ids)
        for side, cases in outcomes.items()
    }


def render_counts(node_ids: Sequence[str], outcomes: Outcomes) -> str:
    """A row per test file and side: the count of each outcome that occurs anywhere."""
    per_side = {side: counts(node_ids, cases) for side, cases in outcomes.items()}
    shown = [
        outcome
        for outcome in OUTCOMES
        if outcome in ("passed", "failed", "skipped")
        or any(c[outcome] for per_file in per_side.values() for c in per_file.values())
    ]
    rows = [["file", "wheel", *shown]]
    files = list(dict.fromkeys(file_of(n) for n in node_ids))
    for file in files:
        for number, (side, per_file) in enumerate(per_side.items()):
            rows.append(
                [file if number == 0 else "", side, *(str(per_file[file][o]) for o in shown)]
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def render_differences(found: Sequence[Difference]) -> str:
    """Each differing case: its node id, then each side's outcome and first message line."""
    lines = []
    for difference in found:
        lines.append(difference.node_id)
        for side, case in difference.cases.items():
            lines.append(f"  {side}: {case.outcome}{': ' + case.message if case.message else ''}")
    return "\n".join(lines)
