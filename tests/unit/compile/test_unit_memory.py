"""Per-unit peak memory: each compiler process is charged to the object its driver names."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from toolchain.compile.compilation import Process, process_table
from toolchain.compile.unit_memory import UnitMemory, output_of, unit_name
from toolchain.util.units import MIB

ONEDNN_OBJ = "/b/.deps/onednn-build/src/cpu/CMakeFiles/dnnl_cpu.dir/rnn/ref_rnn.cpp.o"


def _fake_proc(root: Path, pid: int, argv: list[str], hwm_kib: int | None) -> None:
    folder = root / str(pid)
    folder.mkdir(parents=True)
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (folder / "status").write_text(
        f"Name:\tx\nVmHWM:\t {hwm_kib} kB\n" if hwm_kib is not None else "Name:\tx\n"
    )


def _process(pid: int, parent: int, name: str, started: int = 1) -> Process:
    return Process(pid=pid, parent=parent, name=name, rss_bytes=0, started=started)


def test_a_compiler_is_charged_to_its_drivers_object(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 10, ["g++", "-c", "ref_rnn.cpp", "-o", ONEDNN_OBJ], 9000)
    _fake_proc(tmp_path, 11, ["cc1plus", "ref_rnn.cpp", "-o", "/tmp/ccX.s"], 400 * 1024)
    _fake_proc(tmp_path, 20, ["g++", "-c", "a.cpp", "-o", "CMakeFiles/_C.dir/csrc/a.cpp.o"], 1)
    _fake_proc(tmp_path, 21, ["cc1plus", "a.cpp", "-o", "/tmp/ccY.s"], 3000 * 1024)
    _fake_proc(tmp_path, 30, ["/usr/bin/ld", "-shared", "-o", "_C.abi3.so"], 700 * 1024)
    pch = "CMakeFiles/_C.dir/cmake_pch.hxx.gch"
    _fake_proc(tmp_path, 40, ["g++", "-x", "c++-header", "-o", pch, "-c", "cmake_pch.hxx.cxx"], 1)
    _fake_proc(tmp_path, 41, ["cc1plus", "-o", "/tmp/ccZ.s", f"--output-pch={pch}"], 900 * 1024)
    tree = [
        _process(10, 1, "g++"),
        _process(11, 10, "cc1plus"),
        _process(20, 1, "g++"),
        _process(21, 20, "cc1plus"),
        _process(30, 1, "ld"),
        _process(40, 1, "g++"),
        _process(41, 40, "cc1plus"),
    ]
    memory = UnitMemory()
    memory.sample(tree, proc=tmp_path)
    # a later sample sees a higher mark; a lower one (another process) never lowers it
    (tmp_path / "21" / "status").write_text(f"VmHWM:\t {3500 * 1024} kB\n")
    memory.sample(tree, proc=tmp_path)
    assert memory.peaks == {
        "dnnl_cpu.dir/rnn/ref_rnn.cpp.o": 400 * MIB,
        "_C.dir/csrc/a.cpp.o": 3500 * MIB,
        "_C.abi3.so": 700 * MIB,
        "_C.dir/cmake_pch.hxx.gch": 900 * MIB,
    }
    record = memory.record(heaviest=1)
    assert record["by_target"] == {
        "_C": {"units": 2, "peak_mib": 3500},
        "dnnl_cpu": {"units": 1, "peak_mib": 400},
    }
    assert record["heaviest_units_mib"] == {"_C.dir/csrc/a.cpp.o": 3500}
    assert record["links_mib"] == {"_C.abi3.so": 700}


def test_processes_without_an_output_are_not_charged(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 10, ["g++", "-E", "a.cpp"], 1)
    _fake_proc(tmp_path, 11, ["cc1plus", "-E", "a.cpp"], 50 * 1024)
    _fake_proc(tmp_path, 12, ["cc1plus", "gone.cpp"], None)  # exited between the two reads
    memory = UnitMemory()
    memory.sample(
        [_process(10, 1, "g++"), _process(11, 10, "cc1plus"), _process(12, 99, "cc1plus")],
        proc=tmp_path,
    )
    assert memory.peaks == {}
    assert output_of(12, {}, proc=tmp_path) is None


def test_unit_names_keep_the_target_and_the_source() -> None:
    assert unit_name(ONEDNN_OBJ) == "dnnl_cpu.dir/rnn/ref_rnn.cpp.o"
    assert unit_name("/w/build/temp/_C_AVX2.abi3.so") == "_C_AVX2.abi3.so"


@pytest.mark.integration
def test_a_real_compiler_is_measured(tmp_path: Path) -> None:
    # a unit that keeps cc1plus busy for a few seconds: many template instantiations
    source = tmp_path / "heavy.cpp"
    source.write_text(
        "#include <map>\n#include <string>\n#include <vector>\n"
        "template <int N> struct T { std::map<std::string, std::vector<T<N - 1>>> m; "
        "int f() { return T<N - 1>().f() + int(m.size()); } };\n"
        "template <> struct T<0> { int f() { return 0; } };\n"
        + "".join(f"int g{i}() {{ return T<{i % 40 + 200}>().f(); }}\n" for i in range(100))
    )
    obj = tmp_path / "CMakeFiles" / "heavy.dir" / "heavy.cpp.o"
    obj.parent.mkdir(parents=True)
    driver = subprocess.Popen(["g++", "-O2", "-ftemplate-depth=2000", "-c", source, "-o", obj])
    memory = UnitMemory()
    while driver.poll() is None:
        memory.sample([p for p in process_table() if p.pid == driver.pid or p.parent == driver.pid])
        time.sleep(0.05)
    assert driver.returncode == 0
    assert memory.by_target()["heavy"]["units"] == 1
    assert memory.peaks["heavy.dir/heavy.cpp.o"] > 20 * MIB, "cc1plus's own high-water mark"
