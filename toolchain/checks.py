"""Results of `verify`'s checks: pass / warn / fail / skip, each failure with its fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    name: str
    status: str
    summary: str
    fix: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def timed(self, seconds: float) -> CheckResult:
        return replace(self, seconds=round(seconds, 1))


def worst(results: Sequence[CheckResult]) -> str:
    statuses = {result.status for result in results}
    return next((status for status in (FAIL, WARN, PASS) if status in statuses), SKIP)


def render(results: Sequence[CheckResult]) -> str:
    lines = []
    for result in results:
        lines.append(f"{result.status.upper():4}  {result.name:9} {result.summary}")
        lines += [f"      fix: {line}" for line in result.fix.splitlines()]
    counts = {status: sum(r.status == status for r in results) for status in (PASS, WARN, FAIL)}
    lines.append(
        f"verify: {counts[FAIL]} failed, {counts[WARN]} warned, {counts[PASS]} passed "
        f"in {sum(r.seconds for r in results):.0f} s"
    )
    return "\n".join(lines)
