"""The memory flag, computed from fake /sys and /proc trees as vLLM 0.32 computes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.util.units import GIB
from toolchain.verify.memflag import node_memory, reservation

KIB = 1024


def _node(tmp_path: Path, total_gib: float, free_gib: float, file_gib: float = 0) -> Path:
    nodes = tmp_path / "nodes"
    (nodes / "node0").mkdir(parents=True)
    kb = {
        k: int(v * GIB / KIB)
        for k, v in {
            "MemTotal": total_gib,
            "MemFree": free_gib,
            "Active(file)": file_gib / 2,
            "Inactive(file)": file_gib / 2,
            "SReclaimable": 0,
        }.items()
    }
    (nodes / "node0" / "meminfo").write_text(
        "".join(f"Node 0 {key}:  {value} kB\n" for key, value in kb.items())
    )
    return nodes


def test_node_meminfo_decides_and_the_default_does_not_fit(tmp_path: Path) -> None:
    nodes = _node(tmp_path, total_gib=24, free_gib=10, file_gib=4)
    memory = node_memory(nodes=nodes, cgroup_root=tmp_path / "no-cgroup")
    assert memory.source == "node meminfo"
    assert memory.available_bytes == 14 * GIB
    result = reservation(memory)
    assert not result.fits and result.requested_bytes > 22 * GIB
    assert result.recommended_utilization == 0.52  # (14 - 1.5 GiB margin) / 24, rounded down
    assert result.recommended_kvcache_gib == 11  # the 12.5 GiB spare less 1 for the weights


def test_containers_without_numa_nodes_use_system_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        f"MemTotal: {8 * GIB // KIB} kB\nMemFree: 1 kB\nMemAvailable: {7 * GIB // KIB} kB\n"
    )
    memory = node_memory(nodes=tmp_path / "none", meminfo=meminfo, cgroup_root=tmp_path / "x")
    assert memory.source.startswith("system meminfo")
    assert (memory.total_bytes, memory.available_bytes) == (8 * GIB, 7 * GIB)


def test_cgroup_limit_at_the_root_clamps_total_and_available(tmp_path: Path) -> None:
    nodes = _node(tmp_path, total_gib=64, free_gib=60)
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "memory.max").write_text(str(8 * GIB))
    (root / "memory.current").write_text(str(3 * GIB))
    memory = node_memory(nodes=nodes, cgroup_root=root)
    assert (memory.total_bytes, memory.available_bytes) == (8 * GIB, 5 * GIB)
    assert not reservation(memory).fits
    half = reservation(memory, 0.5)
    assert half.fits and not half.leaves_margin  # 4 GiB of 5 leaves less than the 1.5 GiB margin
    assert reservation(memory, 0.3).leaves_margin


def test_check_memory_command_says_when_the_default_would_not_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolchain import cli
    from toolchain.cli import verify as verify_commands
    from toolchain.verify.memflag import NodeMemory

    small = NodeMemory(
        node=0,
        total_bytes=16 * GIB,
        available_bytes=10 * GIB,
        source="node meminfo",
        system_total_bytes=32 * GIB,
        system_available_bytes=30 * GIB,
    )
    monkeypatch.setattr(verify_commands, "node_memory", lambda node: small)
    assert cli.main(["check-memory"]) == 1
    out = capsys.readouterr().out
    assert (
        "NUMA node 0 (node meminfo): 16.00 GiB total, 10.00 GiB available "
        "(/proc/meminfo: 32.00 GiB total, 30.00 GiB available)" in out
    )
    assert "reserves 14.72 GiB of CPU memory: does NOT fit: vLLM refuses to start" in out
    assert "fits with 1.50 GiB to spare: --gpu-memory-utilization 0.53" in out  # (10 - 1.5) / 16
    # 8.8 GiB of 10 would start now, but vLLM's own processes take most of the rest first
    assert cli.main(["check-memory", "--utilization", "0.55"]) == 1
    assert "leaves less than the 1.50 GiB" in capsys.readouterr().out
    assert cli.main(["check-memory", "--utilization", "0.5"]) == 0


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1.5", "1e400", "0", "-0.1", "x"])
@pytest.mark.parametrize(
    "command", [["check-memory", "--utilization"], ["verify", "--gpu-memory-utilization"]]
)
def test_a_utilization_that_is_not_a_share_of_memory_is_refused(
    capsys: pytest.CaptureFixture[str], command: list[str], value: str
) -> None:
    """#31 F19: vLLM takes a finite share in (0, 1]; nan and inf once gave a traceback and 1.5
    a verdict on memory that no run could ask for."""
    from toolchain import cli

    assert cli.main([command[0], f"{command[1]}={value}"]) == 2  # `=`: "-inf" is not a flag
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is not a share of memory" in err, err
    assert "above 0 and at most 1" in err


def test_a_numa_node_that_is_not_there_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#31 F19: --node 5 on a one-node machine gave node 0's answer under node 5's name."""
    from toolchain.errors import UsageError

    nodes = _node(tmp_path, total_gib=24, free_gib=10)
    assert node_memory(0, nodes=nodes, cgroup_root=tmp_path / "x").node == 0
    for node in (5, -1):
        with pytest.raises(UsageError, match=f"NUMA node {node} does not exist here.*node 0"):
            node_memory(node, nodes=nodes, cgroup_root=tmp_path / "x")
