"""QEMU's CPU models and the Debian root of each foreign architecture, from data/emulation.toml;
the /proc/cpuinfo an emulated CPU would have, written from the features the probe read from it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from toolchain.errors import UsageError
from toolchain.util.datafile import check_keys, load_toml, string, string_list, table

MODEL_KEYS = {"qemu_cpu", "implementer", "part", "variant", "revision", "summary"}
ROOT_KEYS = {
    "debian_arch", "suite", "python", "qemu", "binfmt", "packages", "wheel_platforms",
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class CpuModel:
    name: str
    qemu_cpu: str  # the value of QEMU_CPU
    implementer: str
    part: str
    variant: str
    revision: str
    summary: str


@dataclass(frozen=True, kw_only=True)
class RootSpec:
    arch: str
    debian_arch: str
    suite: str
    python: str
    qemu: str
    binfmt: str
    packages: tuple[str, ...]
    wheel_platforms: tuple[str, ...]


def emulation_data() -> tuple[Path, dict[str, Any]]:
    path = Path(str(resources.files("toolchain") / "data" / "emulation.toml"))
    return path, load_toml(path)


@functools.cache
def cpu_models() -> dict[str, CpuModel]:
    path, data = emulation_data()
    models = {}
    for name, entry in table(data, "models", where=str(path)).items():
        where = f"{path} [models.{name}]"
        check_keys(entry, MODEL_KEYS, where=where)
        fields = {key: string(entry, key, where=where) for key in MODEL_KEYS}
        models[name] = CpuModel(name=name, **fields)
    return models


def cpu_model(name: str) -> CpuModel:
    models = cpu_models()
    if name not in models:
        raise UsageError(f"unknown emulated CPU model {name!r}; known: {', '.join(models)}")
    return models[name]


@functools.cache
def root_spec(arch: str) -> RootSpec:
    path, data = emulation_data()
    roots = table(data, "root", where=str(path))
    if arch not in roots:
        raise UsageError(f"no emulated root for {arch}; known: {', '.join(roots)}")
    entry, where = roots[arch], f"{path} [root.{arch}]"
    check_keys(entry, ROOT_KEYS, where=where)
    return RootSpec(
        arch=arch,
        packages=string_list(entry, "packages", where=where),
        wheel_platforms=string_list(entry, "wheel_platforms", where=where),
        **{
            key: string(entry, key, where=where)
            for key in ROOT_KEYS - {"packages", "wheel_platforms"}
        },
    )


@functools.cache
def hwcap_names(arch: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    path, data = emulation_data()
    where = f"{path} [hwcaps.{arch}]"
    entry = table(table(data, "hwcaps", where=str(path)), arch, where=where)
    return string_list(entry, "hwcap", where=where), string_list(entry, "hwcap2", where=where)


def features(hwcap: int, hwcap2: int, arch: str = "aarch64") -> list[str]:
    """The kernel's feature names for the two HWCAP words, in /proc/cpuinfo's order."""
    names1, names2 = hwcap_names(arch)
    return [name for bit, name in enumerate(names1) if hwcap >> bit & 1] + [
        name for bit, name in enumerate(names2) if hwcap2 >> bit & 1
    ]


def cpuinfo_text(model: CpuModel, hwcap: int, hwcap2: int, cpus: int) -> str:
    """/proc/cpuinfo as an arm64 Linux writes it for `cpus` processors of this model."""
    block = [
        "BogoMIPS\t: 50.00",
        f"Features\t: {' '.join(features(hwcap, hwcap2))}",
        f"CPU implementer\t: {model.implementer}",
        "CPU architecture: 8",
        f"CPU variant\t: {model.variant}",
        f"CPU part\t: {model.part}",
        f"CPU revision\t: {model.revision}",
    ]
    return "".join(f"processor\t: {n}\n" + "\n".join(block) + "\n\n" for n in range(cpus))
