"""What `--gpu-memory-utilization` reserves on vLLM's CPU backend, computed as vLLM 0.32 does.

Despite its name the flag reserves that share of CPU memory (default 0.92) on the worker's NUMA
node, at start-up: vLLM reads /sys/devices/system/node/nodeN/meminfo (MemFree + Active(file) +
Inactive(file) + SReclaimable), falls back to system-wide numbers where the kernel exposes no node
(containers often show none), clamps both by the cgroup limit read at the cgroup root, and refuses
to start when ceil(total * utilization) exceeds what is available
(vllm/utils/cpu_resource_utils.py: get_memory_node_info; vllm/v1/worker/cpu_worker.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from toolchain.detect.memory import parse_meminfo
from toolchain.errors import UsageError
from toolchain.util.cgroup import read_int
from toolchain.util.units import GIB, gib

DEFAULT_UTILIZATION = 0.92
V1_UNLIMITED = 1 << 62  # vLLM's own threshold for cgroup v1's "no limit"
# What a setting must leave free when it is judged: vLLM compares at engine start, after its API,
# engine-core and worker processes have imported torch. Measured: 1.11 GiB gone between our
# reading and vLLM's (docs/benchmarks.md); 1.5 GiB keeps a third more, and still lets 0.92 pass
# on an idle 23.5 GiB node, where vLLM really starts with it.
ENGINE_START_MARGIN = 3 * GIB // 2


@dataclass(frozen=True, kw_only=True)
class NodeMemory:
    node: int
    total_bytes: int
    available_bytes: int
    source: str  # "node meminfo" or "system meminfo (no NUMA node exposed)"
    # /proc/meminfo's figures, so a user sees why a large machine gets a small node budget
    system_total_bytes: int = 0
    system_available_bytes: int = 0


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """What a setting reserves on a node, whether vLLM starts with it, and a setting that does."""

    memory: NodeMemory
    utilization: float
    margin_bytes: int = ENGINE_START_MARGIN

    @property
    def requested_bytes(self) -> int:
        return math.ceil(self.memory.total_bytes * self.utilization)

    @property
    def fits(self) -> bool:
        """vLLM would start with what is available now."""
        return self.requested_bytes <= self.memory.available_bytes

    @property
    def leaves_margin(self) -> bool:
        """... and still would after `margin_bytes` more were taken."""
        return self.requested_bytes + self.margin_bytes <= self.memory.available_bytes

    @property
    def spare_bytes(self) -> int:
        return max(0, self.memory.available_bytes - self.margin_bytes)

    @property
    def recommended_utilization(self) -> float:
        total = self.memory.total_bytes
        recommended = math.floor(self.spare_bytes / total * 100) / 100 if total else 0
        return min(self.utilization, recommended)

    @property
    def recommended_kvcache_gib(self) -> int:
        # the KV cache alone; a GiB of the spare is left for the weights and activations
        return max(0, self.spare_bytes // GIB - 1)


def _node_meminfo(text: str) -> dict[str, int]:
    """Lines like "Node 0 MemFree:  1234 kB", as bytes per key."""
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[3].isdigit():
            values[parts[2].rstrip(":")] = int(parts[3]) * 1024
    return values


def _cgroup_root(cgroup_root: Path) -> tuple[int | None, int | None]:
    """(limit, usage) where vLLM looks: the cgroup root only, v2 first, then v1."""
    v2 = read_int(cgroup_root / "memory.max")
    if v2 is not None:
        return v2, read_int(cgroup_root / "memory.current")
    v1 = read_int(cgroup_root / "memory" / "memory.limit_in_bytes")
    if v1 is not None and v1 < V1_UNLIMITED:
        return v1, read_int(cgroup_root / "memory" / "memory.usage_in_bytes")
    return None, None


def node_memory(
    node: int = 0,
    *,
    nodes: Path = Path("/sys/devices/system/node"),
    meminfo: Path = Path("/proc/meminfo"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> NodeMemory:
    path = nodes / f"node{node}" / "meminfo"
    exposed = sorted(int(p.name[4:]) for p in nodes.glob("node*") if p.name[4:].isdigit())
    if node < 0 or (exposed and node not in exposed):
        raise UsageError(
            f"NUMA node {node} does not exist here; this machine has node "
            + ", ".join(map(str, exposed or [0])),
            hint="give --node one of those (the node the vLLM worker is bound to)",
        )
    system = parse_meminfo(meminfo.read_text())
    system_total = system["MemTotal"]
    system_available = system.get("MemAvailable", system["MemFree"])
    if path.is_file():
        info = _node_meminfo(path.read_text())
        total = info["MemTotal"]
        available = (
            info["MemFree"] + info["Active(file)"] + info["Inactive(file)"] + info["SReclaimable"]
        )
        source = "node meminfo"
    else:
        total, available = system_total, system_available
        source = "system meminfo (no NUMA node exposed)"
    limit, usage = _cgroup_root(cgroup_root)
    if limit is not None and limit < total:
        total = limit
        available = max(0, min(available, limit - (usage or 0)))
    return NodeMemory(
        node=node,
        total_bytes=total,
        available_bytes=available,
        source=source,
        system_total_bytes=system_total,
        system_available_bytes=system_available,
    )


def reservation(
    memory: NodeMemory,
    utilization: float = DEFAULT_UTILIZATION,
    margin_bytes: int = ENGINE_START_MARGIN,
) -> Reservation:
    """Whether vLLM would start, whether it leaves `margin_bytes`, and a setting that does."""
    return Reservation(memory=memory, utilization=utilization, margin_bytes=margin_bytes)


def describe_node(memory: NodeMemory) -> str:
    """The node's budget beside /proc/meminfo's figures: why 23.5 GiB can mean 11.7 here."""
    return (
        f"NUMA node {memory.node} ({memory.source}): {gib(memory.total_bytes)} total, "
        f"{gib(memory.available_bytes)} available (/proc/meminfo: "
        f"{gib(memory.system_total_bytes)} total, {gib(memory.system_available_bytes)} available)"
    )
