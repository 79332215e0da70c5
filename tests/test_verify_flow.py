"""verify end to end against an existing environment, with a fake Python standing in for it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.host import detect_host


@pytest.fixture
def zen4(cpuinfo_file, monkeypatch: pytest.MonkeyPatch) -> None:
    host = detect_host(cpuinfo_file=cpuinfo_file("x86-zen4"))
    monkeypatch.setattr(
        "toolchain.verify.detect_host", lambda: replace(host, numa_nodes=1, cpu_quota=None)
    )


FACTS = {
    "python": "",
    "vllm_distributions": {"vllm": "0.32.0+cpu.portable"},
    "vllm_version_of_vllm": "0.32.0+cpu.portable",
    "torch": "2.13.0+cpu",
    "torch_cuda": None,
    "companions": {},
    "platform": {"device_type": "cpu", "error": ""},
    "kernels_loaded": False,
    "openmp_runtimes": ["/site/torch/lib/libgomp.so.1"],
    "torch_threads": 2,
    "affinity": [0, 1],
    "console_script": "",
    "console_script_exists": True,
    "bundled_tcmalloc": ["/site/vllm/libs/libtcmalloc_minimal.so.4"],
}


def _environment(tmp_path: Path, fake_programs, *, sigill: bool = False) -> list[str]:
    """A fake environment; with `sigill`, loading `_C` kills the process as on a CPU without AMX."""
    package = tmp_path / "site" / "vllm"
    package.mkdir(parents=True)
    for tier in ("_C", "_C_AVX512", "_C_AVX2"):
        (package / f"{tier}.abi3.so").write_bytes(b"\x7fELF")
    facts = json.dumps({**FACTS, "vllm_package": str(package)})

    def python(argv: list[str]) -> tuple[int, str]:
        if argv[1].endswith("probe_env.py"):
            return (-4, "") if sigill and argv[2:] else (0, f"log line\nRESULT {facts}\n")
        if argv[1] == "-c" and "find_spec" in argv[2]:
            return 0, f"{package}\n"
        return (-4, "") if sigill and argv[-1].endswith("/_C.abi3.so") else (0, "")

    fake_programs.add("python", answer=python)
    fake_programs.add("vllm", "0.32.0+cpu.portable\n")
    project = tmp_path / "project"
    project.mkdir()
    python_path = str(fake_programs.folder / "python")
    return [
        "verify",
        "--python",
        python_path,
        "--project",
        str(project),
        "--work-dir",
        str(tmp_path / "work"),
    ]


def test_verify_an_existing_environment_without_engines(
    tmp_path: Path, fake_programs, zen4, capsys
) -> None:
    work = tmp_path / "work"
    code = main([*_environment(tmp_path, fake_programs), "--only", "install,isa,import,threads"])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads((work / "verify" / "report.json").read_text())
    assert [c["name"] for c in report["checks"]] == ["install", "isa", "import", "threads"]
    assert {c["status"] for c in report["checks"]} == {"pass"}
    assert "verify: 0 failed, 0 warned, 4 passed" in out
    probes = [c for c in fake_programs.calls if c[1].endswith("probe_env.py")]
    assert [c[2:] for c in probes] == [[], ["--load-kernels"]]
    loads = [c for c in fake_programs.calls if c[1] == "-c" and "load_library" in c[2]]
    assert sorted(Path(c[-1]).name for c in loads) == [
        "_C.abi3.so",
        "_C_AVX2.abi3.so",
        "_C_AVX512.abi3.so",
    ]


def test_a_tier_killed_by_sigill_is_a_failed_check_not_a_crash(
    tmp_path: Path, fake_programs, zen4, capsys
) -> None:
    argv = [*_environment(tmp_path, fake_programs, sigill=True), "--only", "isa,threads"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL  isa       vLLM loads _C on this CPU and it cannot: _C.abi3.so: killed by SIGILL"
        in out
    )
    assert "WARN  threads" in out and "without vLLM's kernels" in out
