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


def render(results: Sequence[CheckResult], seconds: float) -> str:
    lines = []
    for result in results:
        lines.append(f"{result.status.upper():4}  {result.name:9} {result.summary}")
        lines += [f"      fix: {line}" for line in result.fix.splitlines()]
    counts = {status: sum(r.status == status for r in results) for status in (PASS, WARN, FAIL)}
    lines.append(
        f"verify: {counts[FAIL]} failed, {counts[WARN]} warned, {counts[PASS]} passed "
        f"in {seconds:.0f} s"
    )
    return "\n".join(lines)


@dataclass
class Findings:
    """What a check found, each with its fix; `result` turns them into pass / warn / fail."""

    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    def fail(self, what: str, fix: str) -> None:
        self.failures.append(what)
        self.fixes.append(fix)

    def warn(self, what: str, fix: str) -> None:
        self.warnings.append(what)
        self.fixes.append(fix)

    def result(self, name: str, summary: str, details: dict[str, Any]) -> CheckResult:
        status = FAIL if self.failures else WARN if self.warnings else PASS
        found = "; ".join([*self.failures, *self.warnings])
        return CheckResult(
            name=name,
            status=status,
            summary=found if self.failures else "; ".join(filter(None, [summary, found])),
            fix="\n".join(dict.fromkeys(self.fixes)),
            details=details,
        )
