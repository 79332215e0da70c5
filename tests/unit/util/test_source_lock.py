"""Trust on first use: a source the recipe has no hash for is recorded once, then held to it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolchain.errors import DataFileError, SourceError
from toolchain.util.source_lock import LOCK_NAME, check_archive, read_lock

A, B = "a" * 64, "b" * 64


def _check(archive: Path, found: str, recipe_sha256: str | None = None) -> str:
    return check_archive(
        name="ComputeLibrary",
        ref="v52.6.0",
        archive=archive,
        recipe_sha256=recipe_sha256,
        found=found,
        recipe="vllm-0.32.0.toml",
    )


def test_first_use_records_then_every_later_use_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "ComputeLibrary-52.6.0.tar.gz"
    assert _check(archive, A).startswith("first use: recorded in")
    out = capsys.readouterr().out
    assert out.count("warning: trust on first use") == 1
    assert f'add to the recipe: tar_sha256 = "{A}"' in out
    entry = read_lock(tmp_path)[archive.name]
    assert entry["tar_sha256"] == A and entry["ref"] == "v52.6.0"

    assert "matches the hash recorded on first use" in _check(archive, A)
    assert "warning" not in capsys.readouterr().out  # warned once, on first use only

    before = (tmp_path / LOCK_NAME).read_bytes()
    with pytest.raises(SourceError, match=f"recorded {A} when it was first used"):
        _check(archive, B)
    assert (tmp_path / LOCK_NAME).read_bytes() == before  # a changed archive never re-records


def test_the_recipe_hash_decides_where_there_is_one(tmp_path: Path) -> None:
    archive = tmp_path / "oneDNN-3.13.tar.gz"
    assert _check(archive, A, recipe_sha256=A) == "matches the recipe"
    with pytest.raises(SourceError, match=f"the recipe expects {A}"):
        _check(archive, B, recipe_sha256=A)
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"archives": {"x.tar.gz": {"tar_sha256": 1}}}', '{"archives": []}'],
)
def test_a_malformed_lock_is_one_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / LOCK_NAME).write_text(text)
    with pytest.raises(DataFileError, match=LOCK_NAME):
        _check(tmp_path / "x.tar.gz", A)


def test_entries_for_other_archives_are_kept(tmp_path: Path) -> None:
    _check(tmp_path / "one.tar.gz", A)
    _check(tmp_path / "two.tar.gz", B)
    data = json.loads((tmp_path / LOCK_NAME).read_text())
    assert {k: v["tar_sha256"] for k, v in data["archives"].items()} == {
        "one.tar.gz": A,
        "two.tar.gz": B,
    }
