"""Facts of a release from its pyproject.toml, requirements files and CMakeLists.txt."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from toolchain.errors import DataFileError
from toolchain.recipegen.sdist import (
    APPLE_DOCS,
    BUILD_REQUIREMENTS,
    CMAKELISTS,
    CPU_REQUIREMENTS,
    PKG_INFO,
    PYPROJECT,
    SdistFiles,
)
from toolchain.runtime_deps import PYTORCH_CPU_INDEX

# Platforms whose torch pin is read from the markers: the recipe's two, and macOS for the report.
PLATFORMS: Mapping[str, dict[str, str]] = {
    "x86_64": {"platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux"},
    "aarch64": {"platform_machine": "aarch64", "platform_system": "Linux", "sys_platform": "linux"},
    "Darwin": {"platform_machine": "arm64", "platform_system": "Darwin", "sys_platform": "darwin"},
}

HOST_MARKERS = re.compile(r"python_|implementation_|platform_(release|version)|os_name")


@dataclass(frozen=True, kw_only=True)
class Requirements:
    build_file: str  # the build requirements' path inside the sdist
    build_requires: tuple[str, ...]  # without torch, as upstream writes them
    torch: Mapping[str, str]  # platform -> pinned version (2.13.0+cpu)
    direct_urls: Mapping[str, str]  # requirement name -> URL, from requirements/cpu.txt


def sdist_version(files: SdistFiles) -> str:
    found = re.search(r"^Version: (\S+)$", files.text(PKG_INFO), flags=re.MULTILINE)
    if found is None:
        raise DataFileError(f"{files.name} {PKG_INFO}: no Version line")
    return found.group(1)


def python_requires(files: SdistFiles) -> str:
    """requires-python as upstream writes it (">=3.11,<3.15")."""
    project = tomllib.loads(files.text(PYPROJECT)).get("project", {})
    value = project.get("requires-python") if isinstance(project, dict) else None
    if not isinstance(value, str):
        raise DataFileError(f"{files.name} {PYPROJECT}: no [project] requires-python")
    try:
        SpecifierSet(value)
    except InvalidSpecifier as exc:
        raise DataFileError(f"{files.name} {PYPROJECT}: requires-python {value!r}") from exc
    return value


def cmake_minimum(files: SdistFiles) -> str:
    found = re.search(r"cmake_minimum_required\s*\(\s*VERSION\s+([0-9.]+)", files.text(CMAKELISTS))
    if found is None:
        raise DataFileError(f"{files.name} {CMAKELISTS}: no cmake_minimum_required(VERSION ...)")
    return found.group(1)


def _lines(text: str, where: str) -> list[Requirement]:
    """The requirements of a requirements file; an option line (-r, -c) is refused, except the
    PyTorch CPU index the recipe's torch comes from anyway (vLLM 0.20 to 0.24)."""
    found = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line or line.split() == ["--extra-index-url", PYTORCH_CPU_INDEX]:
            continue
        if line.startswith("-"):
            raise DataFileError(f"{where}: '{line}' is an option line this generator does not read")
        try:
            found.append(Requirement(line))
        except InvalidRequirement as exc:
            raise DataFileError(f"{where}: '{line}' is not a requirement ({exc})") from exc
    return found


def _torch_pins(requirements: list[Requirement], where: str) -> dict[str, str]:
    for r in requirements:
        # PLATFORMS names the machine only: the rest would be the generator's own Python's
        if r.name == "torch" and r.marker is not None and HOST_MARKERS.search(str(r.marker)):
            raise DataFileError(
                f"{where}: the torch pin '{r}' depends on more than the platform",
                hint="the generator reads torch pins by machine and OS only; write them by hand",
            )
    pins: dict[str, str] = {}
    for platform, env in PLATFORMS.items():
        chosen = [r for r in requirements if r.name == "torch" and _applies(r.marker, env)]
        exact = [s.version for r in chosen for s in r.specifier if s.operator == "=="]
        if len(chosen) != 1 or len(exact) != 1:
            raise DataFileError(
                f"{where}: expected one 'torch==X' line for {platform}, found "
                f"{[str(r) for r in chosen] or 'none'}"
            )
        pins[platform] = exact[0]
    return pins


def _applies(marker: Marker | None, env: dict[str, str]) -> bool:
    return marker is None or marker.evaluate(env)


def requirements(files: SdistFiles) -> Requirements:
    build_file, build_text = files.first(BUILD_REQUIREMENTS)
    build = _lines(build_text, f"{files.name} {build_file}")
    cpu = [r for r in _cpu_lines(files) if r.name == "torch" or r.url]
    build_pins = _torch_pins(build, f"{files.name} {build_file}")
    cpu_pins = _torch_pins(cpu, f"{files.name} {CPU_REQUIREMENTS}")
    if build_pins != cpu_pins:
        raise DataFileError(
            f"{files.name}: {build_file} pins torch {build_pins}, {CPU_REQUIREMENTS} {cpu_pins}",
            hint="the build and the runtime need the same torch; check the release by hand",
        )
    kept = [line for line in _raw_lines(build_text) if Requirement(line).name != "torch"]
    return Requirements(
        build_file=build_file,
        build_requires=tuple(kept),
        torch=build_pins,
        direct_urls={r.name: r.url for r in cpu if r.url},
    )


def _cpu_lines(files: SdistFiles) -> list[Requirement]:
    """requirements/cpu.txt without its `-r common.txt` (no torch pin or URL lives there)."""
    text = files.text(CPU_REQUIREMENTS)
    kept = "\n".join(line for line in text.splitlines() if not line.startswith("-r "))
    return _lines(kept, f"{files.name} {CPU_REQUIREMENTS}")


def _raw_lines(text: str) -> list[str]:
    """Requirement lines as upstream writes them, comments and blank lines left out."""
    lines = (raw.split(" #", 1)[0].strip() for raw in text.splitlines())
    return [line for line in lines if line and not line.startswith(("#", "-"))]


def drop_reason(url: str) -> str:
    """Why a direct-URL requirement is left out of the wheel, naming what it points at."""
    parsed = urlparse(url)
    parts = parsed.path.strip("/").split("/")
    if (
        parsed.hostname == "github.com"
        and len(parts) >= 5
        and parts[2:4] == ["releases", "download"]
    ):
        project, tag = parts[1], parts[4].removeprefix("v")
        return (
            f"a direct GitHub URL ({project} {tag}); install {project} from your own mirror "
            "if needed"
        )
    return f"a direct URL ({parsed.hostname}); install it from your own mirror if needed"


# macOS names upstream's docs use -> the version a wheel's deployment target names
MACOS_NAMES = {"Ventura": "13.0", "Sonoma": "14.0", "Sequoia": "15.0", "Tahoe": "26.0"}


def apple_floors(files: SdistFiles) -> tuple[str, str]:
    """(macos_min, clang_min) from upstream's macOS install page: "OS: `macOS Sonoma` or later",
    "Compiler: `Apple Clang >= 15.0.0`"."""
    where = f"{files.name} {APPLE_DOCS}"
    text = files.text(APPLE_DOCS)
    macos = re.search(r"OS: `macOS (\w+)` or later", text)
    clang = re.search(r"Compiler: `Apple Clang >= ([0-9]+)\.([0-9]+)", text)
    if macos is None or clang is None:
        raise DataFileError(f"{where}: no 'OS: `macOS NAME` or later' or 'Apple Clang >= X' line")
    if macos.group(1) not in MACOS_NAMES:
        raise DataFileError(
            f"{where}: macOS {macos.group(1)} is a name this generator does not know",
            hint="add it to MACOS_NAMES in toolchain/recipegen/facts.py",
        )
    return MACOS_NAMES[macos.group(1)], f"{clang.group(1)}.{clang.group(2)}"
