"""The architectures vLLM's CPU backend supports, and this machine's in their names."""

from __future__ import annotations

import platform

SUPPORTED_ARCHES = ("x86_64", "aarch64")


ARCH_NAMES = {"arm64": "aarch64", "amd64": "x86_64", "x86_64": "x86_64", "aarch64": "aarch64"}


def machine_arch() -> str:
    machine = platform.machine().lower()
    return ARCH_NAMES.get(machine, machine or "unknown")
