"""Earlier builds like this one, from the manifests in the wheel folder.

The plan's expected cost, the preflight's disk need and the compile's ETA are each learned from
them, and only from builds of the same wheel version (release and target), target architecture,
build type, optimisation level, precompiled-header and torch-header settings: a `RelWithDebInfo`
tree is about twice a `Release` one, `-O2` kernels cost fewer CPU-seconds than `-O3` ones, a
build with precompiled headers is cheaper but holds three 0.7 GB headers more, the lean
<torch/all.h> saves about 8 CPU-seconds per kernel unit (docs/benchmarks.md), and
`portable` names an x86 and an Arm target. A manifest that names no
build type (none that records these figures) or is unreadable is passed over. Not told apart yet:
a macOS and a Linux aarch64 build of the same target (no macOS build has been made).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError
from toolchain.plan.buildplan import BuildPlan
from toolchain.settings import BUILD_TYPE_LEVEL
from toolchain.util.datafile import load_json


@dataclass(frozen=True)
class EarlierBuild:
    manifest: str  # the manifest's file name
    record: Mapping[str, Any]

    def figure(self, *keys: str) -> float | None:
        """A finite number in the record (`figure("compile", "cpu_seconds")`); None where the
        manifest lacks it or holds something else there (a string, a boolean, NaN)."""
        value: Any = self.record
        for key in keys:
            if not isinstance(value, Mapping) or key not in value:
                return None
            value = value[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        try:
            number = float(value)
        except OverflowError:  # an integer of hundreds of digits
            return None
        return number if math.isfinite(number) else None

    @property
    def created(self) -> str:
        """When it was built (ISO 8601, which sorts by time); "" when the manifest lacks it."""
        created = self.record.get("created")
        return created if isinstance(created, str) else ""


def earlier_builds(
    wheel_dir: Path,
    wheel_version: str,
    *,
    arch: str,
    build_type: str,
    opt_level: str,
    precompiled: bool,
    torch_headers: str,
) -> list[EarlierBuild]:
    """The readable manifests in `wheel_dir` of builds like this one, by file name."""
    found = []
    for path in sorted(wheel_dir.glob(f"vllm-{wheel_version}-*.whl.manifest.json")):
        try:
            record = load_json(path)
            env = record.get("env") or {}
            built_as = env.get("CMAKE_BUILD_TYPE") or record.get("build_type")
            like = (
                record.get("target_arch", arch),
                built_as,
                # a manifest from before the level was set: its build type's own
                record.get("opt_level") or BUILD_TYPE_LEVEL.get(built_as),
                bool(record.get("precompiled_headers")),
                # a manifest from before the lean header was a build with torch's own
                record.get("torch_headers", "full"),
            )
        except (DataFileError, AttributeError):
            continue
        if like == (arch, build_type, opt_level, precompiled, torch_headers):
            found.append(EarlierBuild(path.name, record))
    return found


def builds_like(plan: BuildPlan) -> list[EarlierBuild]:
    """The earlier builds like the one `plan` makes."""
    return earlier_builds(
        plan.paths.wheel_dir,
        plan.wheel_version,
        arch=plan.arch,
        build_type=plan.build_type,
        opt_level=plan.opt_level,
        precompiled=bool(plan.precompiled_headers),
        torch_headers=plan.torch_headers,
    )
