"""The CPU probe on Arm for real: cross-compiled for aarch64 and run under QEMU's CPU models, it
must report exactly the features each model has, and detect/plan must choose the Arm target from
its output (`--probe-output`), as they do from the live probe on an Arm machine."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.emulate.standins import cross_compiler

ROOT = Path(__file__).resolve().parents[2]
CPUINFO = ROOT / "tests" / "fixtures" / "cpuinfo"
CROSS_CC, QEMU = cross_compiler("aarch64"), "qemu-aarch64-static"

pytestmark = [
    # one test process runs them all, so the module fixture below runs once (noxfile: loadgroup)
    pytest.mark.xdist_group("arm-probe"),
    pytest.mark.compile,
    pytest.mark.skipif(
        CROSS_CC is None or shutil.which(QEMU) is None,
        reason=f"needs aarch64-linux-gnu-gcc and {QEMU} (apt-get install gcc-aarch64-linux-gnu "
        "qemu-user-static; .ci/run installs them)",
    ),
]

# What QEMU 7.2+ gives each model (target/arm/cpu64.c), in the kernel's HWCAP names.
MODELS = {
    "cortex-a72": {"asimd"},
    "neoverse-n1": {"asimd", "fphp", "asimdhp", "asimddp"},
    "a64fx": {"asimd", "fphp", "asimdhp", "sve"},
    "max": {"asimd", "fphp", "asimdhp", "asimddp", "sve", "sve2", "i8mm", "bf16"},
}


@pytest.fixture(scope="module")
def probe_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("arm-probe")
    binary = folder / "cpuprobe-aarch64"
    subprocess.run(
        [str(CROSS_CC), "-O2", "-static", "-o", str(binary), str(ROOT / "native" / "cpuprobe.c")],
        check=True,
    )
    outputs = {}
    for model in MODELS:
        result = subprocess.run(
            [QEMU, "-cpu", model, str(binary)], check=True, capture_output=True, text=True
        )
        outputs[model] = folder / f"{model}.out"
        outputs[model].write_text(result.stdout)
    return outputs


def _fields(path: Path) -> dict[str, str]:
    return dict(line.partition(" ")[::2] for line in path.read_text().splitlines())


@pytest.mark.parametrize("model", MODELS)
def test_the_probe_reports_exactly_what_the_model_has(
    probe_outputs: dict[str, Path], model: str
) -> None:
    fields = _fields(probe_outputs[model])
    assert fields["arch"] == "aarch64"
    assert set(fields["flags"].split()) == MODELS[model]
    assert int(fields["hwcap"], 16) & (1 << 1)  # HWCAP_ASIMD, as the kernel granted it


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data: dict[str, object] = json.loads(captured.out)
    return data


@pytest.mark.parametrize(
    ("model", "cpuinfo", "core", "isa_on", "targets"),
    [
        # NEON without FP16/dot product: no vLLM CPU wheel runs there; the plan says so.
        ("cortex-a72", "arm-cortex-a72", "Cortex-A72", {"asimd"}, {}),
        ("neoverse-n1", "arm-graviton2", "Neoverse-N1", {"asimd", "fp16", "dotprod"},
         {"0.32.0": "portable", "0.34.0": "neon", "0.16.0": "neon"}),
        ("max", "arm-neoverse-v2", "Neoverse-V2",
         {"asimd", "fp16", "dotprod", "bf16", "i8mm", "sve", "sve2"},
         {"0.32.0": "portable", "0.34.0": "bf16i8mm", "0.16.0": "bf16"}),
        # The probe decides over cpuinfo: a Neoverse-V2 cpuinfo where the CPU gives only N1's
        # (0.32.0's Arm default is portable, which runs on both: 0.34.0 shows the choice).
        ("neoverse-n1", "arm-neoverse-v2", "Neoverse-V2", {"asimd", "fp16", "dotprod"},
         {"0.32.0": "portable", "0.34.0": "neon"}),
    ],
)  # fmt: skip
def test_detect_and_plan_choose_the_arm_target_from_the_probe(
    probe_outputs: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    cpuinfo: str,
    core: str,
    isa_on: set[str],
    targets: dict[str, str],
) -> None:
    # the Arm machine plans for itself, as with the live probe there (on x86: a cross plan)
    monkeypatch.setattr("toolchain.detect.host.machine_arch", lambda: "aarch64")
    machine = ["--cpuinfo", str(CPUINFO / f"{cpuinfo}.txt"), "--probe-output"]
    machine.append(str(probe_outputs[model]))
    host = _json(capsys, "detect", *machine, "--json")
    assert host["source"] == "probe-file" and host["arm_core"] == core
    isa = host["isa"]
    assert isinstance(isa, dict)
    assert {name for name, on in isa.items() if on} == isa_on
    for vllm, target in targets.items():
        plan = _json(capsys, "plan", "--vllm", vllm, *machine, "--json")
        assert plan["target_isa"] == target
        env = plan["env"]
        assert isinstance(env, dict)
        assert ("VLLM_CPU_ARM_BF16" in env) == (target == "bf16i8mm")
        assert ("VLLM_CPU_ARM_I8MM" in env) == (target == "bf16i8mm")
    if not targets:
        assert main(["plan", "--vllm", "0.32.0", *machine]) == 5
        assert "cannot run any vLLM 0.32.0 CPU wheel: it lacks fp16, dotprod" in (
            capsys.readouterr().err
        )
