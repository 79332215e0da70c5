"""The compile cache of a plan: ccache or sccache as the launcher, a shared sccache backend with
ccache as its fallback, and the build servers of an sccache-dist scheduler."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from toolchain.detect.host import Host
from toolchain.options import BuildOptions
from toolchain.plan.buildplan import DistPlan
from toolchain.util.compile_cache import PREPROCESS_MIB, scheduler_status
from toolchain.util.units import MIB


def cache_env(
    host: Host,
    options: BuildOptions,
    build_dir: Path,
    warnings: list[str],
    precompiled: bool = False,
) -> dict[str, str]:
    """The launcher's settings; `precompiled`: units include a precompiled header, which ccache
    caches only when told to be sloppy about it (measured: otherwise none of them)."""
    names = {tool.name for tool in host.build_tools}
    if options.cache is not None:
        # The pinned sccache in the build venv (on the compile's PATH): vLLM's setup.py takes
        # sccache when it finds one. Its server listens on a socket of this build only. ccache's
        # settings stay for the fallback when the cache cannot be reached.
        shared = {
            "CMAKE_C_COMPILER_LAUNCHER": "sccache",
            "CMAKE_CXX_COMPILER_LAUNCHER": "sccache",
            "SCCACHE_SERVER_UDS": str(_private_tmp(build_dir, ".sock")),
            "SCCACHE_IDLE_TIMEOUT": "0",
            # paths inside these folders count relative to them, so that another machine's
            # work folder (and the compiler provisioned into it) hits the same entries
            "SCCACHE_BASEDIRS": ":".join(
                str(d) for d in (options.work_dir, options.source_dir) if d is not None
            ),
            **options.cache.env,
            # the client's private config (the scheduler, its token), written by start-cache
            **({"SCCACHE_CONF": str(_private_tmp(build_dir, ".toml"))} if options.dist else {}),
        }
        fallback = _ccache_env(options, build_dir, precompiled) if "ccache" in names else {}
        return {**fallback, **shared}
    # ccache runs each compiler as its child, so the compile's CPU-seconds, per-unit memory and
    # memory guard see it; a local sccache runs them in its own server, outside the build's
    # process tree (a 28-minute compile once counted 20 CPU-seconds and no unit's memory).
    # vLLM's setup.py takes sccache whenever the compile's PATH has one, unless told not to:
    # the build venv (first on that PATH) keeps the sccache a --cache build installed into it.
    if "ccache" in names:
        return {**LAUNCHER_CCACHE, **NO_SCCACHE, **_ccache_env(options, build_dir, precompiled)}
    if "sccache" in names:
        warnings.append(
            "sccache compiles in its own server, outside the build's processes: the compile's "
            "CPU-seconds and each unit's memory go unmeasured (apt-get install ccache)"
        )
        return {"CMAKE_C_COMPILER_LAUNCHER": "sccache", "CMAKE_CXX_COMPILER_LAUNCHER": "sccache"}
    warnings.append(
        "no ccache or sccache on PATH: a rebuild compiles everything again (apt-get install ccache)"
    )
    return dict(NO_SCCACHE)


PCH_SLOPPINESS = {"CCACHE_SLOPPINESS": "pch_defines,time_macros"}
LAUNCHER_CCACHE = {"CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache"}
NO_SCCACHE = {"VLLM_DISABLE_SCCACHE": "1"}
NO_SECOND_CPP = {"CCACHE_NOCPP2": "1"}


def _pch_sloppiness() -> dict[str, str]:
    """A precompiled header defines no macros ccache could see, and its build time is in it:
    ccache must not mind either. Added to the user's own CCACHE_SLOPPINESS (the variable
    replaces a `sloppiness` line of ccache.conf)."""
    own = [value for value in os.environ.get("CCACHE_SLOPPINESS", "").split(",") if value]
    needed = PCH_SLOPPINESS["CCACHE_SLOPPINESS"].split(",")
    return {"CCACHE_SLOPPINESS": ",".join(dict.fromkeys([*own, *needed]))}


def _private_tmp(build_dir: Path, suffix: str) -> Path:
    """A file in /tmp of this build only: a socket path must be short (108 bytes)."""
    digest = hashlib.sha256(str(build_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"vcb-sccache-{digest}{suffix}"


def dist_plan(options: BuildOptions, warnings: list[str]) -> DistPlan | None:
    """The build servers the scheduler has now; none reachable means compiling here."""
    if options.dist is None:
        return None
    status = scheduler_status(options.dist.url)
    if status is None or status[1] == 0:
        warnings.append(
            f"the sccache-dist scheduler {options.dist.url} "
            + ("cannot be reached" if status is None else "has no build servers")
            + ": jobs are sized for compiling here (sccache compiles here what it cannot send)"
        )
    servers, cpus = status or (0, 0)
    return DistPlan(
        scheduler=options.dist.url,
        servers=servers,
        remote_cpus=cpus,
        preprocess_bytes=PREPROCESS_MIB * MIB,
    )


def _ccache_env(options: BuildOptions, build_dir: Path, precompiled: bool) -> dict[str, str]:
    # Hits across build folders and rebuilt venvs: paths relative to the build folder, the
    # compiler judged by its content, not its mtime. On a miss ccache has already preprocessed
    # the unit for its key: the compiler gets that output, not the source to preprocess again
    # (run_second_cpp false; the same objects, docs/benchmarks.md), unless the user's own
    # CCACHE_CPP2 says otherwise. A precompiled header is read only by a compile of the source.
    second_cpp = precompiled or "CCACHE_CPP2" in os.environ
    return {
        **(_pch_sloppiness() if precompiled else {}),
        **({} if second_cpp else NO_SECOND_CPP),
        "CCACHE_DIR": str(options.work_dir / "ccache"),
        "CCACHE_BASEDIR": str(build_dir),
        "CCACHE_NOHASHDIR": "true",
        "CCACHE_COMPILERCHECK": "content",
        "CCACHE_MAXSIZE": "20G",
    }
