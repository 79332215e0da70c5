"""A Mac from its saved sysctl and vm_stat (tests/fixtures/sysctl, vm_stat: real dumps).

The detect goldens (tests/fixtures/detect/) pin what a user reads about each Mac; to accept an
intended change, rerun with WRITE_GOLDEN_PLANS=1 and review the diff.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.detect.host import detect_host
from toolchain.detect.sysctl import parse_sysctl, parse_vm_stat
from toolchain.errors import DataFileError, UsageError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SYSCTL, VM_STAT = FIXTURES / "sysctl", FIXTURES / "vm_stat"
# (sysctl dump, vm_stat): pairs whose vm_stat fits in that Mac's memory (README: not one machine)
MACS = {
    "m1pro": ("mac-m1pro-monterey", "mac-16g-partial"),
    "m2": ("mac-m2-monterey", "mac-16g-partial"),
    "m4max": ("mac-m4max-sequoia", "mac-m5pro-48g"),
}
# What a user reads about a Mac: this machine's disk, Pythons and tools stay out of the golden
GOLDEN_KEYS = (
    "arch",
    "system",
    "cpu_model",
    "isa",
    "isa_level",
    "microarchitecture",
    "source",
    "cpus_usable",
    "memory",
    "mac",
    "os_name",
    "numa_nodes",
)


def mac(name: str) -> tuple[Path, Path]:
    sysctl, vm_stat = MACS[name]
    return SYSCTL / f"{sysctl}.txt", VM_STAT / f"{vm_stat}.txt"


@pytest.mark.parametrize("name", sorted(MACS))
def test_detect_json_of_each_mac_is_unchanged(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sysctl, vm_stat = mac(name)
    assert main(["detect", "--json", "--sysctl", str(sysctl), "--vm-stat", str(vm_stat)]) == 0
    data = json.loads(capsys.readouterr().out)
    text = json.dumps({key: data[key] for key in GOLDEN_KEYS}, indent=2, sort_keys=True) + "\n"
    golden = FIXTURES / "detect" / f"mac-{name}.json"
    if os.environ.get("WRITE_GOLDEN_PLANS"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_the_m1_lacks_what_the_m2_and_m4_have() -> None:
    m1, m2, m4 = (detect_host(sysctl_file=s, vm_stat_file=v) for s, v in map(mac, sorted(MACS)))
    assert [m1.isa["bf16"], m1.isa["i8mm"]] == [False, False]
    assert all(h.isa["bf16"] and h.isa["i8mm"] and h.isa["dotprod"] for h in (m2, m4))
    assert [h.microarchitecture for h in (m1, m2, m4)] == ["m1", "m2", "m4"]
    assert [h.isa_level for h in (m1, m2, m4)] == ["armv8.4a", "armv8.5a", "armv8.6a"]
    assert m4.mac is not None and (m4.mac.performance_cores, m4.mac.efficiency_cores) == (12, 4)
    assert (m4.cpus_usable, m4.memory.total_bytes) == (16, 64 << 30)


def test_available_memory_is_free_inactive_and_speculative_pages() -> None:
    host = detect_host(sysctl_file=mac("m4max")[0], vm_stat_file=VM_STAT / "mac-m5pro-48g.txt")
    assert host.memory.available_bytes == (310017 + 871248 + 33878) * 16384
    assert host.memory.usable_bytes == host.memory.available_bytes  # no cgroup on a Mac


def test_the_page_size_is_read_from_the_header_not_assumed() -> None:
    assert parse_vm_stat((VM_STAT / "mac-intel-4k.txt").read_text(), where="x")[0] == 4096
    assert parse_vm_stat((VM_STAT / "mac-m5pro-48g.txt").read_text(), where="x")[0] == 16384


def test_a_vm_stat_of_a_bigger_mac_is_refused() -> None:
    with pytest.raises(DataFileError, match="not the same Mac"):
        detect_host(sysctl_file=mac("m1pro")[0], vm_stat_file=VM_STAT / "mac-m5pro-48g.txt")


def test_a_saved_mac_needs_both_files_and_no_linux_ones() -> None:
    sysctl, vm_stat = mac("m2")
    with pytest.raises(UsageError, match="--vm-stat"):
        detect_host(sysctl_file=sysctl)
    with pytest.raises(UsageError, match="give one kind"):
        detect_host(
            sysctl_file=sysctl, vm_stat_file=vm_stat, meminfo_file=FIXTURES / "meminfo" / "x"
        )


def test_files_of_the_wrong_kind_are_named(tmp_path: Path) -> None:
    cpuinfo = FIXTURES / "cpuinfo" / "arm-graviton3.txt"
    with pytest.raises(DataFileError, match="not a macOS sysctl dump"):
        detect_host(sysctl_file=cpuinfo, vm_stat_file=VM_STAT / "mac-16g-partial.txt")
    with pytest.raises(DataFileError, match="not vm_stat output"):
        detect_host(sysctl_file=mac("m2")[0], vm_stat_file=cpuinfo)


def test_sysctl_lines_in_either_format() -> None:
    values = parse_sysctl("hw.ncpu: 8\nhw.memsize=17179869184\nkern.osproductversion: 15.3.1\n")
    assert values == {
        "hw.ncpu": "8",
        "hw.memsize": "17179869184",
        "kern.osproductversion": "15.3.1",
    }


def test_this_mac_is_read_by_the_same_parser(
    fake_programs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a Mac detect asks sysctl and vm_stat and gets what the saved files hold."""
    sysctl, vm_stat = mac("m4max")
    fake_programs.add("sysctl", sysctl.read_text())
    fake_programs.add("vm_stat", vm_stat.read_text())
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    live, saved = detect_host(), detect_host(sysctl_file=sysctl, vm_stat_file=vm_stat)
    assert live.source == "sysctl" and saved.source == "sysctl-file"
    for key in ("arch", "isa", "isa_level", "microarchitecture", "cpus_usable", "memory", "mac"):
        assert getattr(live, key) == getattr(saved, key), key
    assert [call[0].rsplit("/", 1)[-1] for call in fake_programs.calls[:2]] == ["sysctl", "vm_stat"]
