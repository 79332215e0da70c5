"""Distributed compiles in the plan: the scheduler asked for its servers, the jobs sized to them."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from toolchain.detect.host import Host
from toolchain.errors import UsageError
from toolchain.options import BuildOptions, build_options
from toolchain.plan.render import render_plan
from toolchain.settings import BUILD_SETTINGS, resolve_settings
from toolchain.util.compile_cache import parse_dist_scheduler, scheduler_status
from toolchain.util.units import MIB

from .test_plan import host_of, plan  # noqa: F401  (host_of is a fixture)


@pytest.fixture
def scheduler(
    http_server: Callable[[type[BaseHTTPRequestHandler]], str],
) -> Callable[[int, int], str]:
    """A loopback HTTP server answering /api/v1/scheduler/status as sccache-dist 0.16 does."""

    def start(build_servers: int, cpus: int) -> str:
        body = struct.pack("<3Q", build_servers, cpus, 0)

        class Status(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = self.path == "/api/v1/scheduler/status"
                self.send_response(200 if found else 404)
                self.end_headers()
                self.wfile.write(body if found else b"")

        return http_server(Status)

    return start


def test_the_scheduler_reports_its_servers(scheduler: Callable[[int, int], str]) -> None:
    assert scheduler_status(scheduler(3, 48)) == (3, 48)
    assert scheduler_status("http://127.0.0.1:9") is None


def test_jobs_count_the_build_servers_cpus_and_preprocessing_memory(
    host_of: Callable[..., Host],  # noqa: F811
    scheduler: Callable[[int, int], str],
) -> None:
    url = scheduler(2, 32)
    # the seed VM: alone it gets 1 job; with 32 remote CPUs its 4.66 GiB holds 16 preprocessors
    seed = host_of("x86-haswell", cpus=6, total_gib=7.75, available_gib=4.66)
    result = plan(seed, dist=parse_dist_scheduler(url))
    assert result.dist is not None and (result.dist.servers, result.dist.remote_cpus) == (2, 32)
    assert result.jobs.memory_per_job_bytes == 256 * MIB
    assert result.max_jobs == 16 and result.jobs.limited_by == "memory"
    assert result.jobs.pools == (), "a job here preprocesses: no heavy units here"
    # the units compile there: a header precompiled here would be work here for nothing
    assert result.precompiled_headers == () and "CCACHE_SLOPPINESS" not in result.env
    assert not any("--precompiled-headers" in w for w in result.warnings)  # not asked: silent
    asked = plan(seed, dist=parse_dist_scheduler(url), origins={"precompiled_headers": "flag"})
    assert asked.precompiled_headers == ()
    assert any("--precompiled-headers is ignored" in w for w in asked.warnings)
    text = render_plan(result)
    assert f"distributed compiles: {url}, 2 build server(s) with 32 CPUs" in text
    # a big machine: the CPUs here and there
    assert plan(host_of("x86-zen4", cpus=8), dist=parse_dist_scheduler(url)).max_jobs == 40


def test_an_unreachable_scheduler_sizes_for_this_machine(
    host_of: Callable[..., Host],  # noqa: F811
) -> None:
    result = plan(host_of("x86-zen4"), dist=parse_dist_scheduler("http://127.0.0.1:9"))
    assert result.max_jobs == 2 and result.jobs.memory_per_job_bytes == 3830 * MIB
    assert any("cannot be reached: jobs are sized for compiling here" in w for w in result.warnings)


def _options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **cli: str) -> BuildOptions:
    monkeypatch.chdir(tmp_path)
    return build_options(resolve_settings(BUILD_SETTINGS, cli, dict(os.environ), {}))


def test_the_token_comes_from_the_environment_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("VCB_DIST_TOKEN", raising=False)
    with pytest.raises(UsageError, match="needs the scheduler's client token in VCB_DIST_TOKEN"):
        _options(monkeypatch, tmp_path, dist_scheduler="http://sched:10600")
    with pytest.raises(UsageError, match="credentials do not go in the URL"):
        parse_dist_scheduler("http://user:secret@sched:10600")
    with pytest.raises(UsageError, match="not an http"):
        parse_dist_scheduler("sched:10600")
    monkeypatch.setenv("VCB_DIST_TOKEN", "t")
    options = _options(monkeypatch, tmp_path, dist_scheduler="http://sched:10600/", work_dir="w")
    # without --cache, sccache's own folder in the work dir is the cache
    assert options.dist is not None and options.dist.url == "http://sched:10600"
    assert options.cache is not None and options.cache.where == str(Path("w") / "sccache")
