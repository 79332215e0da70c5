"""The human-readable `detect` report."""

from __future__ import annotations

from toolchain.detect.host import Host
from toolchain.detect.isa import isa_table
from toolchain.detect.tools import Tool
from toolchain.util.units import gib

SOURCE_WORDS = {
    "probe": "the CPU probe (CPUID/XGETBV or getauxval), checked against /proc/cpuinfo",
    "proc-cpuinfo": "/proc/cpuinfo",
    "cpuinfo-file": "a saved cpuinfo file",
    "probe-file": "the saved output of the CPU probe on that machine, checked against its cpuinfo",
    "sysctl": "sysctl hw.optional.* on this Mac",
    "sysctl-file": "a saved macOS sysctl dump (hw.optional.*)",
    "py-cpuinfo": "py-cpuinfo",
}


def render_host(host: Host) -> str:
    present = [name for name, on in host.isa.items() if on]
    absent = [name for name, on in host.isa.items() if not on and name in _arch_features(host)]
    lines = [
        f"CPU          {host.cpu_model or 'unknown model'} ({host.arch}"
        f"{'' if host.supported else ', NOT SUPPORTED by vLLM CPU'})",
        f"ISA level    {host.isa_level}",
        f"microarch    {host.microarchitecture or 'unknown'} (archspec's name)",
        f"features     {' '.join(present) or 'none'}",
        f"missing      {' '.join(absent) or 'none'}",
        f"decided by   {SOURCE_WORDS.get(host.source, host.source)}",
    ]
    if host.probe and host.arch == "aarch64":
        hwcap, hwcap2 = host.probe["hwcap"] or 0, host.probe["hwcap2"] or 0
        lines.append(f"probe        HWCAP=0x{hwcap:x}, HWCAP2=0x{hwcap2:x}")
    elif host.probe:
        amx = {None: "no AMX", True: "AMX tile data permitted", False: "AMX tile data REFUSED"}
        lines.append(
            f"probe        XCR0=0x{host.probe['xcr0'] or 0:x}, AVX10 version "
            f"{host.probe['avx10_version']}, {amx[host.probe['amx_permitted']]}"
        )
    lines += [f"  note: {note}" for note in host.notes]
    lines += _mac_lines(host)
    quota = f" (cgroup quota {host.cpu_quota:g} CPUs)" if host.cpu_quota is not None else ""
    memory = host.memory
    lines += [
        f"CPUs usable  {host.cpus_usable}{quota}",
        f"memory       total {gib(memory.total_bytes)}, available {gib(memory.available_bytes)}, "
        f"cgroup limit {gib(memory.limit_bytes)}, usable now {gib(memory.usable_bytes)}",
        f"NUMA nodes   {'unknown' if host.numa_nodes is None else host.numa_nodes}"
        f"{' (the kernel shows none: a container?)' if host.numa_nodes == 0 else ''}",
        f"disk free    {gib(host.disk_free_bytes)} at {host.disk_path}",
        f"OS           {host.os_name}, glibc {host.glibc or 'unknown'}",
    ]
    if host.source == "sysctl-file":
        return "\n".join([*lines, "programs     the Mac's Pythons and compilers are not in a dump"])
    lines += [
        f"Pythons      {', '.join(host.pythons) or 'none found on PATH'}",
        f"compilers    {_tool_list(host.compilers)}",
        f"build tools  {_tool_list(host.build_tools)}",
    ]
    if host.system != "Darwin":  # vLLM builds without NUMA on macOS
        lines.append(
            f"libnuma      {host.numa_header or 'numa.h not found (apt-get install libnuma-dev)'}"
        )
    return "\n".join(lines)


def _mac_lines(host: Host) -> list[str]:
    if host.mac is None:
        return []
    mac = host.mac
    cores = (
        f"{mac.performance_cores} performance + {mac.efficiency_cores} efficiency cores"
        if mac.performance_cores and mac.efficiency_cores
        else "core kinds unknown"
    )
    page = f"{mac.page_size // 1024} KiB pages" if mac.page_size else "page size unknown"
    return [
        f"Mac          {cores}, {page}",
        "  note: available memory = free + inactive + speculative pages of vm_stat",
    ]


def _tool_list(tools: tuple[Tool, ...]) -> str:
    return ", ".join(f"{t.name} {t.version or '?'}" for t in tools) or "none found on PATH"


def _arch_features(host: Host) -> set[str]:
    return set(isa_table().features.get(host.arch, {}))
