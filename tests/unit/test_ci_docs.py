"""docs/ci.md shows the CI samples exactly as the files under docs/ci/ hold them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", ["github-workflow.yml", "gitlab-ci.yml", "gitlab-child.py"])
def test_the_page_shows_each_sample_file_as_it_is(name: str) -> None:
    page = (DOCS / "ci.md").read_text()
    blocks = re.findall(r"^```(?:yaml|python)\n(.*?)^```$", page, re.M | re.S)
    assert (DOCS / "ci" / name).read_text() in blocks, f"docs/ci.md differs from docs/ci/{name}"
    assert f"docs/ci/{name}" in page
