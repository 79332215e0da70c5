"""The settings as the typed options each stage takes: checked, converted, defaults applied.

`toolchain.settings` declares each setting once and resolves its value; this module turns the
resolved values into `BuildOptions` (plan, build-wheel) and `PublishOptions` (publish,
install-command). A build setting whose table type is enough (str, int, bool) needs nothing
here: the stages read it with `options.get(name, kind)`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from toolchain.errors import UsageError
from toolchain.runtime_deps import PYTORCH_CPU_INDEX, PipSources
from toolchain.settings import (
    BUILD_SETTINGS,
    PYPI_SIMPLE,
    Resolved,
    Setting,
    default_cache_dir,
    settings_of,
)
from toolchain.targets import default_recipes_dir
from toolchain.util.compile_cache import (
    DIST_TOKEN_ENV,
    DistScheduler,
    SharedCache,
    parse_cache,
    parse_dist_scheduler,
)
from toolchain.util.units import MIB
from toolchain.util.urls import checked_url

T = TypeVar("T")


def _table_defaults() -> dict[str, Any]:
    return {setting.name: setting.default for setting in settings_of("build-wheel")}


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """What plan and build-wheel take from the settings, typed."""

    target: str | None = None
    arch: str | None = None  # the wheel's architecture; None: the target's, else the host's
    jobs: int | None = None
    python: str | None = None
    cxx: str | None = None
    sources: Path | None = None
    source_dir: Path | None = None
    torch_index: str | None = None  # None: the recipe's
    find_links: tuple[Path, ...] = ()
    work_dir: Path = field(default_factory=lambda: Path(default_cache_dir()))
    wheel_dir: Path = Path("wheels")
    reserve_bytes: int = 512 * MIB
    index_url: str = PYPI_SIMPLE
    allow_cuda_torch: bool = False
    cache: SharedCache | None = None
    build_type: str = "Release"
    dist: DistScheduler | None = None
    # where each setting came from (flag, env VCB_X, toml, default, recipe, host), for the manifest
    origins: Mapping[str, str] = field(default_factory=dict)
    # every build setting's checked value by its SETTINGS name, as the table types it: get()
    settings: Mapping[str, Any] = field(default_factory=_table_defaults)

    def get(self, name: str, kind: type[T]) -> T:
        """The build setting `name` of SETTINGS that has no field here, as its `kind`."""
        value = self.get_optional(name, kind)
        if value is None:
            raise TypeError(f"build setting {name} may be unset: read it with get_optional()")
        return value

    def given(self, name: str) -> bool:
        """The user set the setting `name` (a flag, the environment or the settings file), not
        its default."""
        return self.origins.get(name, "default") != "default"

    def get_optional(self, name: str, kind: type[T]) -> T | None:
        """The build setting `name` of SETTINGS with no field here, or None when it is unset."""
        setting = next((s for s in settings_of("build-wheel") if s.name == name), None)
        if name in _FIELD_OF:
            raise KeyError(f"{name}: read options.{_FIELD_OF[name]}")
        if setting is None:
            raise KeyError(f"{name}: no build setting of that name in SETTINGS")
        value = self.settings[name]
        if setting.kind is not kind or not isinstance(value, (kind, type(None))):
            raise TypeError(f"build setting {name} is a {setting.kind.__name__}: {value!r}")
        return value


# the settings with a field above, converted to a richer type than the table's (paths, checked
# URLs, parsed caches) or read throughout the stages; any other is read with BuildOptions.get
_FIELD_OF = {name: name for name in BuildOptions.__dataclass_fields__} | {
    "reserve_mib": "reserve_bytes",
    "dist_scheduler": "dist",
}


def _optional_path(value: str | None) -> Path | None:
    return _expanded(value) if value else None


def _expanded(value: str) -> Path:
    """`~` and `~user` expanded; a user this machine does not have is a usage error."""
    try:
        return Path(value).expanduser()
    except RuntimeError as exc:  # pathlib: "Could not determine home directory."
        raise UsageError(f"{value}: no such user's home folder on this machine") from exc


def find_links(values: Mapping[str, Any]) -> tuple[Path, ...]:
    return tuple(Path(p) for p in (values["find_links"] or "").split(os.pathsep) if p)


def work_dir(values: Mapping[str, Any]) -> Path:
    return _expanded(values["work_dir"])


def build_options(values: Mapping[str, Any]) -> BuildOptions:
    """Resolved settings (see `resolve_settings`, which checked each against the table) as the
    plan's options."""
    if values["vllm"] is not None and not values["vllm"].strip():
        raise UsageError("--vllm is empty", hint="give a version such as 0.32.0, or leave it out")
    dist = parse_dist_scheduler(values["dist_scheduler"]) if values["dist_scheduler"] else None
    if dist and not os.environ.get(DIST_TOKEN_ENV):
        raise UsageError(
            f"--dist-scheduler needs the scheduler's client token in {DIST_TOKEN_ENV}",
            hint=f"export {DIST_TOKEN_ENV}=... (the [client_auth] token of scheduler.conf)",
        )
    return BuildOptions(
        target=values["target"],
        arch=values["arch"],
        jobs=values["jobs"],
        python=values["python"],
        cxx=values["cxx"],
        sources=_optional_path(values["sources"]),
        source_dir=_optional_path(values["source_dir"]),
        torch_index=_url(values, "torch_index"),
        find_links=find_links(values),
        work_dir=work_dir(values),
        wheel_dir=Path(values["wheel_dir"]),
        reserve_bytes=values["reserve_mib"] * MIB,
        index_url=_url(values, "index_url") or PYPI_SIMPLE,
        allow_cuda_torch=values["allow_cuda_torch"],
        cache=_compile_cache(values, dist),
        build_type=values["build_type"],
        dist=dist,
        origins=_origins(values, BUILD_SETTINGS),
        settings={setting.name: values[setting.name] for setting in settings_of("build-wheel")},
    )


def _origins(values: Mapping[str, Any], settings: tuple[Setting, ...]) -> dict[str, str]:
    if not isinstance(values, Resolved):
        return {}
    return {setting.name: values.origins[setting.name] for setting in settings}


def _compile_cache(values: Mapping[str, Any], dist: DistScheduler | None) -> SharedCache | None:
    """--cache; with distributed compiles and no --cache, sccache's own folder in the work dir."""
    if values["cache"]:
        return parse_cache(values["cache"])
    if dist is None:
        return None
    return parse_cache(str(work_dir(values) / "sccache"))


def pip_sources(values: Mapping[str, Any]) -> PipSources:
    """Where pip finds torch +cpu outside a build: --find-links, the PyTorch CPU index."""
    return PipSources(
        find_links=find_links(values), torch_index=_url(values, "torch_index") or PYTORCH_CPU_INDEX
    )


def _url(values: Mapping[str, Any], name: str) -> str | None:
    value = values[name]
    return checked_url(value, "--" + name.replace("_", "-")) if value else None


@dataclass(frozen=True, kw_only=True)
class PublishOptions:
    """What publish and install-command take from the settings, typed."""

    wheel_dir: Path
    index_dir: Path
    upload: str | None
    work_dir: Path
    server_kind: str = "auto"  # toolchain/publish/index_servers.py
    index_url: str | None  # the public index for install-command's requirements, when given
    sources: PipSources
    wheel_variants: bool = False
    recipes: Path = field(default_factory=default_recipes_dir)  # whose targets label wheels


def publish_options(values: Mapping[str, Any]) -> PublishOptions:
    return PublishOptions(
        wheel_dir=Path(values["wheel_dir"]),
        index_dir=Path(values["index_dir"]),
        upload=_url(values, "upload"),
        work_dir=work_dir(values),
        server_kind=values["server_kind"],
        index_url=_url(values, "index_url"),
        sources=pip_sources(values),
        wheel_variants=bool(values["wheel_variants"]),
        recipes=Path(values["recipes"]) if values.get("recipes") else default_recipes_dir(),
    )
