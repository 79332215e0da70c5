"""The instruction-set table: which /proc/cpuinfo tokens make which feature, level and core."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from toolchain.errors import DataFileError
from toolchain.util.datafile import load_toml, string, string_list, table
from toolchain.util.platform import SUPPORTED_ARCHES


@dataclass(frozen=True, kw_only=True)
class IsaTable:
    features: Mapping[str, Mapping[str, tuple[str, ...]]]
    x86_levels: tuple[tuple[str, tuple[str, ...]], ...]
    arm_cores: Mapping[str, str]

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(name for arch in SUPPORTED_ARCHES for name in self.features[arch])

    def feature_flags(self, arch: str, tokens: frozenset[str]) -> dict[str, bool]:
        """Every named feature of both architectures; false when absent or on the other one."""
        present = {
            name: all(token in tokens for token in needed)
            for name, needed in self.features.get(arch, {}).items()
        }
        return {name: present.get(name, False) for name in self.feature_names}

    def x86_level(self, tokens: frozenset[str]) -> str:
        level = "x86-64"
        for name, needed in self.x86_levels:
            if not all(token in tokens for token in needed):
                break
            level = name
        return level

    def arm_core(self, implementer: str, part: str) -> str | None:
        return self.arm_cores.get(f"{implementer.lower()}:{part.lower()}")


def parse_isa_table(data: dict[str, object], *, where: str) -> IsaTable:
    features_data = table(data, "features", where=where)
    features: dict[str, dict[str, tuple[str, ...]]] = {}
    for arch in SUPPORTED_ARCHES:
        arch_table = table(features_data, arch, where=f"{where} [features]")
        features[arch] = {
            name: string_list(arch_table, name, where=f"{where} [features.{arch}]")
            for name in arch_table
        }
    levels_data = data.get("x86_levels", [])
    if not isinstance(levels_data, list) or not all(isinstance(lv, dict) for lv in levels_data):
        raise DataFileError(f"{where}: key 'x86_levels' must be an array of tables")
    levels = tuple(
        (
            string(level, "name", where=f"{where} x86_levels[{index}]"),
            string_list(level, "tokens", where=f"{where} x86_levels[{index}]"),
        )
        for index, level in enumerate(levels_data)
    )
    cores_data = table(data, "arm_cores", where=where)
    cores = {
        key.lower(): string(cores_data, key, where=f"{where} [arm_cores]") for key in cores_data
    }
    return IsaTable(features=features, x86_levels=levels, arm_cores=cores)


@functools.cache
def isa_table() -> IsaTable:
    path = Path(str(resources.files("toolchain") / "data" / "isa.toml"))
    return parse_isa_table(load_toml(path), where=str(path))
