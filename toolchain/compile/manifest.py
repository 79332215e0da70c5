"""The wheel's manifest: what was built, from what, with what, on which machine, and what it cost.

It goes into the wheel (embedded by the repair step) and beside it as WHEEL.manifest.json; plan
reads earlier ones for the expected cost, verify and publish for the target.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolchain import __version__
from toolchain.compile.runner import BuildRun
from toolchain.detect.tools import program_sha256
from toolchain.util.files import atomic_path, disk_bytes, sha256_file


def manifest(build: BuildRun, wheel_name: str) -> dict[str, Any]:
    """The record embedded in the wheel (by repair) and written beside it (by deliver)."""
    plan, host = build.plan, build.host
    return {
        "tool": f"vllm-cpu-builder {__version__}",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "wheel": wheel_name,
        "vllm_version": plan.vllm_version,
        "wheel_version": plan.wheel_version,
        "recipe": Path(plan.recipe).name,
        "source": plan.source.to_json(),
        "third_party": [
            {"name": d.name, "ref": d.ref, "commit": d.commit, "tar_sha256": d.tar_sha256}
            for d in plan.third_party
        ],
        "target_isa": plan.target_isa,
        "target_arch": plan.arch,
        "build_arch": plan.build_arch,
        "cross": _cross_record(build),
        "arm_compute_library": plan.arm_acl,
        "isa_model": plan.isa_model,
        "min_isa": list(plan.min_isa),
        "toolchain": {
            "cxx": plan.compiler.cxx,
            "cxx_version": build.facts.cxx_version,
            "cxx_sha256": program_sha256(plan.compiler.cxx),
            "compiler_origin": plan.compiler.origin,
            "python": plan.python.version,
            "torch": build.facts.torch,
            **build.facts.build_tools,
        },
        "env": plan.env,
        "settings_origin": dict(build.options.origins),
        "host": {
            "arch": host.arch,
            "cpu_model": host.cpu_model,
            "isa_level": host.isa_level,
            "isa": sorted(k for k, v in host.isa.items() if v),
            "cpus_usable": host.cpus_usable,
            "memory_total_bytes": host.memory.total_bytes,
            "os": host.os_name,
            "glibc": host.glibc,
        },
        "jobs": {
            "max_jobs": plan.max_jobs,
            "limited_by": plan.jobs.limited_by,
            "pools": [dataclasses.asdict(pool) for pool in plan.jobs.pools],
        },
        "compile": build.compile_facts(),
        "compile_cache": build.facts.cache,
        "durations_seconds": dict(build.durations),
        "dropped_requirements": [dataclasses.asdict(d) for d in plan.dropped_requirements],
        "patches": [{"file": p.file.name, "sha256": p.sha256} for p in plan.patches],
        "build_type": plan.build_type,
        "opt_level": build.facts.opt_level,
        "kernel_tiers": list(plan.kernel_tiers),
        "onednn_isa": plan.onednn_isa,
        "onednn_prune": plan.onednn_prune and plan.onednn_prune.record(),
        "precompiled_headers": list(build.facts.precompiled_headers),
        "own_torch_headers": build.facts.own_torch_headers,
        "torch_headers": "lean" if build.facts.lean_torch_headers else "full",
        "lean_torch_headers": list(build.facts.lean_torch_headers),
        "debug_info": (
            {"file": debug.name, "sha256": sha256_file(debug), "size_bytes": debug.stat().st_size}
            if (debug := build.facts.debug_archive)
            else None
        ),
    }


def _cross_record(build: BuildRun) -> dict[str, Any] | None:
    """A cross build: the compiler, the sysroot's packages and hashes, the torch built against."""
    cross = build.plan.cross
    if cross is None:
        return None
    return {
        "build_machine": cross.build_machine,
        "host_machine": cross.host_machine,
        "cxx": cross.cxx,
        "cxx_sha256": program_sha256(cross.cxx),
        **(build.facts.cross or {}),
        "toolchain_file": cross.toolchain_file.name,
        "target_torch": build.facts.target_torch,
        "wheel_platform": cross.wheel_platform,
    }


def write_manifest(build: BuildRun, wheel: Path, digest: str, total_seconds: float) -> Path:
    """WHEEL.manifest.json beside the delivered wheel: the embedded manifest plus the wheel's
    hash, size and the build's total time."""
    record = manifest(build, wheel.name) | {
        "wheel_sha256": digest,
        "wheel_size_bytes": wheel.stat().st_size,
        "total_seconds": round(total_seconds, 1),
        # the next plan's disk need (compile/preflight.py)
        "build_tree_bytes": disk_bytes(build.plan.paths.build_dir),
    }
    path = wheel.with_name(f"{wheel.name}.manifest.json")
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path
