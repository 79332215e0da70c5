"""pytest's JUnit XML (`--junitxml`) read back into one outcome per node id.

pytest names a case in the XML by `classname` (the file's path with dots, then its classes) and
`name` (the function with its parameters); `junit_key` turns a node id into that pair the way
pytest's junitxml plugin does, so each case of the XML is found by the node id that was asked
for.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# every outcome a case can have here; "missing": the run asked for it and no result came back
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "missing")


@dataclass(frozen=True, kw_only=True)
class Case:
    outcome: str
    message: str = ""  # the first line of the failure, error or skip message

    def to_json(self) -> dict[str, str]:
        return {"outcome": self.outcome, "message": self.message}


MISSING = Case(outcome="missing", message="no result: its pytest process wrote no XML for it")
# its process wrote XML without it: pytest did not find it on this side (`not found`, exit 4,
# runs nothing of the chunk) or stopped before it
NOT_IN_XML = Case(
    outcome="missing",
    message="no result: not in its pytest process's XML (not found on this side? see its log)",
)


def junit_key(node_id: str) -> tuple[str, str]:
    """(classname, name) of `node_id` in pytest's XML (its junitxml `mangle_test_address`)."""
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def case_of(element: ElementTree.Element) -> Case:
    """The outcome of one <testcase>: a failure wins over an error (a teardown error after a
    failed call), either over a skip; no child element is a pass."""
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        child = element.find(tag)
        if child is None:
            continue
        if outcome == "skipped" and child.get("type") == "pytest.xfail":
            outcome = "xfailed"
        return Case(outcome=outcome, message=first_line(child.get("message") or child.text))
    return Case(outcome="passed")


def read_junit(xml: Path, node_ids: Iterable[str]) -> dict[str, Case] | None:
    """The outcome of each of `node_ids` in `xml` (NOT_IN_XML for one the XML lacks); None when
    there is no readable XML (the process was killed before pytest wrote it)."""
    try:
        root = ElementTree.parse(xml).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    found: dict[tuple[str, str], Case] = {}
    for element in root.iter("testcase"):
        found[(element.get("classname", ""), element.get("name", ""))] = case_of(element)
    return {node_id: found.get(junit_key(node_id), NOT_IN_XML) for node_id in node_ids}
