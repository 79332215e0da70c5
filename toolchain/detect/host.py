"""Everything a build or a verify needs to know about a machine, gathered once."""

from __future__ import annotations

import os
import platform
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolchain.detect import fallback, probe, sysctl
from toolchain.detect.cpus import usable_cpus
from toolchain.detect.isa import isa_table
from toolchain.detect.memory import Memory, read_memory
from toolchain.detect.proc_cpuinfo import CpuInfo, parse_cpuinfo
from toolchain.detect.sysctl import MacInfo
from toolchain.detect.tools import BUILD_TOOLS, Tool, executables_on_path, find_tools, numa_header
from toolchain.detect.uarch import apple_silicon, microarchitecture
from toolchain.errors import DataFileError, UnsupportedHostError, UsageError
from toolchain.util.datafile import read_text
from toolchain.util.platform import SUPPORTED_ARCHES, machine_arch

PROC_CPUINFO = Path("/proc/cpuinfo")
PYTHON_NAME = re.compile(r"^python3\.\d+$")
SAVED_SOURCES = frozenset({"cpuinfo-file", "probe-file", "sysctl-file"})


@dataclass(frozen=True, kw_only=True)
class Host:
    arch: str  # the machine described: this one, or the one a saved cpuinfo comes from
    build_arch: str  # the machine running the toolkit, whatever machine is described
    supported: bool
    cpu_model: str
    arm_core: str | None
    isa: dict[str, bool]
    isa_level: str
    microarchitecture: str | None
    tokens: frozenset[str]
    source: str
    notes: tuple[str, ...]
    probe: dict[str, Any] | None
    cpus_usable: int
    cpu_quota: float | None
    memory: Memory
    numa_nodes: int | None
    disk_free_bytes: int
    disk_path: str
    os_name: str
    glibc: str | None
    pythons: dict[str, str] = field(default_factory=dict)
    tools: tuple[Tool, ...] = ()
    numa_header: str | None = None
    system: str = "Linux"  # platform.system()'s name: "Linux" or "Darwin"
    mac: MacInfo | None = None  # what only a Mac reports (macOS version, core kinds)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tokens"] = sorted(self.tokens)
        data["memory"]["usable_bytes"] = self.memory.usable_bytes
        data["compilers"] = [asdict(tool) for tool in self.compilers]
        data["tools"] = [asdict(tool) for tool in self.build_tools]
        return data

    @property
    def compilers(self) -> tuple[Tool, ...]:
        return tuple(tool for tool in self.tools if tool.name not in BUILD_TOOLS)

    @property
    def build_tools(self) -> tuple[Tool, ...]:
        return tuple(tool for tool in self.tools if tool.name in BUILD_TOOLS)

    def require_supported(self) -> None:
        if not self.supported:
            raise UnsupportedHostError(
                f"{'the machine described' if self.source in SAVED_SOURCES else 'this machine'} "
                f"is {self.arch}: vLLM's CPU backend is supported here only on "
                f"{' and '.join(SUPPORTED_ARCHES)}",
                hint="build on an x86_64 or aarch64 machine (`plan --cpuinfo FILE` plans for "
                "one from its saved /proc/cpuinfo)",
            )


CpuFacts = tuple[CpuInfo, str, tuple[str, ...], dict[str, Any] | None]


def _cpu_from_this_machine() -> CpuFacts:
    """CPU facts and the source that decided them: probe > /proc/cpuinfo > py-cpuinfo (a Mac is
    read by _mac_host)."""
    if PROC_CPUINFO.is_file():
        cpu = parse_cpuinfo(PROC_CPUINFO.read_text())
        cpu = CpuInfo(**{**asdict(cpu), "arch": machine_arch()})
        source = "proc-cpuinfo"
    else:
        cpu, source = fallback.py_cpuinfo(), "py-cpuinfo"
    result, why_not = probe.run_probe()
    if result is None:
        return cpu, source, (f"{why_not}; features come from {source}",), None
    return _probe_decides(cpu, result, "probe")


def _cpu_from_saved_probe(cpu: CpuInfo, probe_file: Path) -> CpuFacts:
    """A saved cpuinfo whose features are decided by the probe's saved output from that machine."""
    result = probe.parse_probe_output(read_text(probe_file))
    if result.arch != cpu.arch:
        raise DataFileError(
            f"{probe_file}: the probe ran on {result.arch}, but the cpuinfo describes {cpu.arch}"
        )
    return _probe_decides(cpu, result, "probe-file")


def _probe_decides(cpu: CpuInfo, result: probe.ProbeResult, source: str) -> CpuFacts:
    reconciled = probe.reconcile(result, cpu.tokens)
    details: dict[str, Any] = (
        {"hwcap": result.hwcap, "hwcap2": result.hwcap2}
        if result.arch == "aarch64"
        else {
            "xcr0": result.xcr0,
            "avx10_version": result.avx10_version,
            "amx_permitted": result.amx_permitted,
        }
    )
    cpu = CpuInfo(**{**asdict(cpu), "tokens": reconciled.tokens})
    return cpu, source, reconciled.notes, details


def _numa_nodes(root: Path = Path("/sys/devices/system/node")) -> int:
    try:
        return sum(1 for entry in root.iterdir() if re.fullmatch(r"node\d+", entry.name))
    except OSError:
        return 0


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                name = line.split("=", 1)[1].strip('"')
                debian = Path("/etc/debian_version")
                return f"{name} ({debian.read_text().strip()})" if debian.is_file() else name
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}"


def _glibc() -> str | None:
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        return None
    return version.removeprefix("glibc ") if version else None


def _pythons() -> dict[str, str]:
    found = {
        name.removeprefix("python"): str(path)
        for name, path in executables_on_path(PYTHON_NAME).items()
    }
    return dict(sorted(found.items(), key=lambda item: [int(p) for p in item[0].split(".")]))


def detect_host(
    *,
    cpuinfo_file: Path | None = None,
    meminfo_file: Path | None = None,
    probe_file: Path | None = None,
    disk_path: Path | None = None,
    sysctl_file: Path | None = None,
    vm_stat_file: Path | None = None,
) -> Host:
    """Describe this machine; a saved cpuinfo (with the probe's saved output) or meminfo replaces
    that part of it; a Mac's saved sysctl and vm_stat describe that whole Mac."""
    linux_files = (cpuinfo_file, meminfo_file, probe_file)
    if sysctl_file is not None or vm_stat_file is not None:
        if any(f is not None for f in linux_files):
            raise UsageError(
                "--sysctl and --vm-stat describe a Mac; --cpuinfo, --meminfo and "
                "--probe-output describe a Linux machine: give one kind"
            )
        return _mac_host(sysctl_file, vm_stat_file, disk_path or Path.cwd())
    if platform.system() == "Darwin" and all(f is None for f in linux_files):
        return _mac_host(None, None, disk_path or Path.cwd())
    notes: tuple[str, ...] = ()
    probe_details: dict[str, Any] | None = None
    if cpuinfo_file is not None:
        cpu, source = parse_cpuinfo(read_text(cpuinfo_file)), "cpuinfo-file"
        if cpu.arch == "unknown":
            raise DataFileError(
                f"{cpuinfo_file}: not a /proc/cpuinfo dump: no 'flags' line (x86), no "
                "'CPU implementer' (Arm), nor another architecture's lines"
            )
        # the described machine's CPUs count where it is the build machine; a cross build
        # (another architecture described) compiles on this one
        cpus, quota = (cpu.processors, None) if cpu.arch == machine_arch() else usable_cpus()
        if probe_file is not None:
            cpu, source, notes, probe_details = _cpu_from_saved_probe(cpu, probe_file)
    elif probe_file is not None:
        raise UsageError(
            "a saved probe output describes another machine's CPU features only",
            hint="give that machine's /proc/cpuinfo with --cpuinfo as well",
        )
    else:
        cpu, source, notes, probe_details = _cpu_from_this_machine()
        cpus, quota = usable_cpus()
    memory = (
        read_memory(meminfo_file, proc_self_cgroup=None)
        if meminfo_file is not None
        else read_memory()
    )
    table = isa_table()
    arm_core = table.arm_core(cpu.arm_implementer, cpu.arm_part) if cpu.arch == "aarch64" else None
    isa_level = (
        table.x86_level(cpu.tokens)
        if cpu.arch == "x86_64"
        else (arm_core or "armv8-a")
        if cpu.arch == "aarch64"
        else cpu.arch
    )
    where = disk_path or Path.cwd()
    return Host(
        arch=cpu.arch,
        build_arch=machine_arch(),
        supported=cpu.arch in SUPPORTED_ARCHES,
        cpu_model=cpu.model or (arm_core or ""),
        arm_core=arm_core,
        isa=table.feature_flags(cpu.arch, cpu.tokens),
        isa_level=isa_level,
        microarchitecture=microarchitecture(cpu, arm_core),
        tokens=cpu.tokens,
        source=source,
        notes=notes,
        probe=probe_details,
        cpus_usable=cpus,
        cpu_quota=quota,
        memory=memory,
        numa_nodes=_numa_nodes() if cpuinfo_file is None else None,
        disk_free_bytes=shutil.disk_usage(where).free,
        disk_path=str(where),
        os_name=_os_name(),
        glibc=_glibc(),
        pythons=_pythons(),
        tools=tuple(find_tools()),
        numa_header=numa_header(),
    )


def _mac_text(sysctl_file: Path | None, vm_stat_file: Path | None) -> tuple[str, str, str, str]:
    """(sysctl text, vm_stat text, and where each came from): saved files, or this Mac's."""
    if sysctl_file is None and vm_stat_file is None:
        return sysctl.live_sysctl(), sysctl.live_vm_stat(), "sysctl on this Mac", "vm_stat"
    if sysctl_file is None or vm_stat_file is None:
        raise UsageError(
            "a saved Mac needs both its sysctl (--sysctl FILE) and its vm_stat (--vm-stat FILE): "
            "the first has the CPU and memory size, the second the available memory",
            hint="on the Mac: sysctl -a > mac.sysctl; vm_stat > mac.vmstat",
        )
    return read_text(sysctl_file), read_text(vm_stat_file), str(sysctl_file), str(vm_stat_file)


def _mac_host(sysctl_file: Path | None, vm_stat_file: Path | None, where: Path) -> Host:
    """A Mac, from one parser whether the text is this Mac's or a saved dump of another."""
    sysctl_text, vm_stat_text, sysctl_where, vm_stat_where = _mac_text(sysctl_file, vm_stat_file)
    values = sysctl.parse_sysctl(sysctl_text)
    cpu = sysctl.mac_cpu(values, where=sysctl_where)
    memory, page_size = sysctl.mac_memory(
        values, vm_stat_text, sysctl_where=sysctl_where, vm_stat_where=vm_stat_where
    )
    mac = sysctl.mac_info(values, page_size)
    table, saved = isa_table(), sysctl_file is not None
    if cpu.arch == "aarch64":
        uarch, isa_level = apple_silicon(cpu.model)
    else:
        uarch, isa_level = None, table.x86_level(cpu.tokens)
    return Host(
        arch=cpu.arch,
        build_arch=machine_arch(),
        supported=cpu.arch in SUPPORTED_ARCHES,
        cpu_model=cpu.model,
        arm_core=None,
        isa=table.feature_flags(cpu.arch, cpu.tokens),
        isa_level=isa_level,
        microarchitecture=uarch,
        tokens=cpu.tokens,
        source="sysctl-file" if saved else "sysctl",
        notes=(),
        probe=None,
        cpus_usable=cpu.processors,
        cpu_quota=None,
        memory=memory,
        numa_nodes=None,
        disk_free_bytes=shutil.disk_usage(where).free,
        disk_path=str(where),
        os_name=f"macOS {mac.macos_version or '(version unknown: no kern.osproductversion)'}",
        glibc=None,
        # a saved Mac's programs are not this machine's: nothing here builds for it
        pythons={} if saved else _pythons(),
        tools=() if saved else tuple(find_tools()),
        numa_header=None,
        system="Darwin",
        mac=mac,
    )
