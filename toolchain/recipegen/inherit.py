"""What no sdist holds, taken from the shipped recipes: measured figures, the preferred Python,
third-party commits and hashes, and what each shipped patch is for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from toolchain.util.datafile import load_toml

MEASURED_KEY = "inherited_from"  # a recipe with it carries another release's measured figures


@dataclass(frozen=True, kw_only=True)
class Shipped:
    """The recipes of a folder as their TOML says, the one being generated left out."""

    recipes: Mapping[Version, dict[str, Any]]
    own: dict[str, Any] | None  # the recipe being replaced (--force), if any

    @classmethod
    def load(cls, folder: Path, *, leave_out: Version) -> Shipped:
        found = {Version(p.stem.removeprefix("vllm-")): p for p in folder.glob("vllm-*.toml")}
        own = found.pop(leave_out, None)
        return cls(
            recipes={v: load_toml(found[v]) for v in sorted(found)},
            own=load_toml(own) if own is not None else None,
        )

    def every(self, version: Version) -> dict[Version, dict[str, Any]]:
        """Every recipe, the one being replaced too: what no sdist holds (a patch's purpose, a
        source's hash at a ref, the preferred Python) it knows as well as any."""
        own = {version: self.own} if self.own is not None else {}
        return dict(sorted({**self.recipes, **own}.items()))

    def measured(self) -> list[Version]:
        return [v for v, data in self.recipes.items() if MEASURED_KEY not in data]

    def measured_source(self, version: Version) -> tuple[Version, dict[str, Any], bool] | None:
        """(release, its recipe, inherited?) of the measured figures for `version`: its own
        recipe's when it replaces a measured one, else the nearest measured release's."""
        if self.own is not None and MEASURED_KEY not in self.own:
            return version, self.own, False
        source = nearest(self.measured(), version)
        return None if source is None else (source, self.recipes[source], True)


def nearest(candidates: list[Version], version: Version) -> Version | None:
    """The newest candidate not newer than `version`, else the oldest newer one."""
    older = [v for v in candidates if v <= version]
    if older:
        return max(older)
    return min(candidates) if candidates else None


def preferred_python(shipped: Shipped, requires: SpecifierSet, version: Version) -> tuple[str, str]:
    """(Python, why): the nearest recipe's preferred if in range, else the oldest in range."""
    every = shipped.every(version)
    source = nearest(list(every), version)
    if source is not None:
        chosen = str(every[source]["python"]["preferred"])
        if requires.contains(f"{chosen}.0") and source == version:
            return chosen, "the preferred Python of the recipe this one replaces"
        if requires.contains(f"{chosen}.0"):
            return chosen, f"{source}'s preferred Python, inside this range"
    for minor in range(8, 30):
        if requires.contains(f"3.{minor}.0"):
            return f"3.{minor}", "the oldest Python in this range (no recipe's preferred is in it)"
    raise ValueError(f"no Python 3 version in {requires}")


def third_party_extras(
    shipped: Shipped, version: Version, name: str, repository: str, ref: str
) -> dict[str, str]:
    """commit and tar_sha256 a shipped recipe records for the same source at the same ref."""
    extras: dict[str, str] = {}
    for data in reversed(list(shipped.every(version).values())):
        for entry in data.get("third_party", []):
            same = (entry.get("name"), entry.get("repository"), entry.get("ref"))
            if same == (name, repository, ref):
                extras.update({k: entry[k] for k in ("commit", "tar_sha256") if k in entry})
                if "tar_sha256" in extras:
                    return extras
    return extras


def patch_entries(shipped: Shipped, version: Version) -> dict[str, dict[str, Any]]:
    """patch file (as recipes name it) -> its entry in the newest recipe that lists it (the
    recipe being replaced counts: what a patch is for is no fact of the sdist)."""
    entries: dict[str, dict[str, Any]] = {}
    for data in shipped.every(version).values():
        for entry in data.get("patches", []):
            entries[entry["file"]] = entry
    return entries
