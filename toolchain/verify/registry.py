"""verify's checks: one module per check in toolchain/verify/checks/, each with a `CHECK`.

A new check is one file there; its `order` places it in the run and the report, `needs` names
the checks whose results it reads (they run before it). Checks are found, not listed, so the
list of names (`--only`, the report) cannot drift from the files.
"""

from __future__ import annotations

import importlib
import pkgutil

from toolchain.verify.checks import Check

CHECKS_PACKAGE = "toolchain.verify.checks"


def load_checks(package: str = CHECKS_PACKAGE) -> tuple[Check, ...]:
    """Every module's CHECK in `package`, in order; a clash or a late need is a bug."""
    found = []
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        check = getattr(importlib.import_module(f"{package}.{module.name}"), "CHECK", None)
        if not isinstance(check, Check):
            raise TypeError(f"{package}.{module.name} has no CHECK = Check(...)")
        found.append(check)
    checks = tuple(sorted(found, key=lambda c: c.order))
    _validate(checks)
    return checks


def _validate(checks: tuple[Check, ...]) -> None:
    seen: set[str] = set()
    orders = [c.order for c in checks]
    for check in checks:
        if check.name in seen or orders.count(check.order) > 1:
            raise ValueError(f"verify check {check.name}: its name or order {check.order} is taken")
        late = [need for need in check.needs if need not in seen]
        if late:
            raise ValueError(f"verify check {check.name} needs {late}, which do not run before it")
        seen.add(check.name)


CHECKS = load_checks()
CHECK_NAMES = tuple(check.name for check in CHECKS)
