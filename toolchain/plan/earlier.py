"""Earlier builds like this one, from the manifests in the wheel folder.

The plan's expected cost, the preflight's disk need and the compile's ETA are each learned from
them, and only from builds of the same wheel version (release and target), build type and
precompiled-header setting: a `RelWithDebInfo` tree is about twice a `Release` one, and a build
with precompiled headers is cheaper but holds three 0.7 GB headers more (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError
from toolchain.util.datafile import load_json

# what a manifest that names no build type was built as: upstream's default, the toolkit's own
# before it had the setting
UNNAMED_BUILD_TYPE = "RelWithDebInfo"


@dataclass(frozen=True)
class EarlierBuild:
    manifest: str  # the manifest's file name
    record: Mapping[str, Any]

    def figure(self, *keys: str) -> float | None:
        """A number in the record (`figure("compile", "cpu_seconds")`); None where the manifest
        lacks it (an older toolkit's) or holds something else."""
        value: Any = self.record
        try:
            for key in keys:
                value = value[key]
            return float(value)
        except (KeyError, TypeError, ValueError):
            return None


def earlier_builds(
    wheel_dir: Path, wheel_version: str, *, build_type: str, precompiled: bool
) -> list[EarlierBuild]:
    """The readable manifests in `wheel_dir` of builds like this one, by file name; a manifest
    that is not JSON, or not an object, is passed over."""
    found = []
    for path in sorted(wheel_dir.glob(f"vllm-{wheel_version}-*.whl.manifest.json")):
        try:
            record = load_json(path)
            env = record.get("env") or {}
            built_as = env.get("CMAKE_BUILD_TYPE") or record.get("build_type") or UNNAMED_BUILD_TYPE
            headers = bool(record.get("precompiled_headers"))
        except (DataFileError, AttributeError):
            continue
        if (built_as, headers) == (build_type, precompiled):
            found.append(EarlierBuild(path.name, record))
    return found
