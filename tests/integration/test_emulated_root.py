"""A short run inside the emulated arm64 root, as verify enters it: the written cpuinfo is what the
emulated process sees (the host's stays untouched), QEMU_CPU picks the model, and, when verify
has installed a wheel there, torch imports under qemu (it segfaults without an Arm cpuinfo)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain.emulate.install import VENV_IN_ROOT
from toolchain.emulate.models import cpu_model, root_spec
from toolchain.emulate.root import ensure_binfmt, plan_root
from toolchain.emulate.session import Wrappers, probe_cpu, write_cpuinfo
from toolchain.settings import default_cache_dir

SPEC = root_spec("aarch64")
PLAN = plan_root(SPEC, Path(os.environ.get("VCB_WORK_DIR") or default_cache_dir()))
ROOT_PYTHON = PLAN.path / "usr" / "bin" / f"python{SPEC.python}"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which(SPEC.qemu) is None, reason=f"needs {SPEC.qemu} "
                       "(apt-get install qemu-user-static)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chroot, mount namespaces)"),
    pytest.mark.skipif(not ROOT_PYTHON.is_file(), reason=f"no emulated root at {PLAN.path}: "
                       "`verify` of an aarch64 wheel makes it (debootstrap, about 6 minutes)"),
]  # fmt: skip

SHOW = (
    "import platform; print(platform.machine()); "
    "print(next(l for l in open('/proc/cpuinfo') if l.startswith('Features')))"
)


def _wrappers(tmp_path: Path, model: str, venv: Path) -> Wrappers:
    ensure_binfmt(SPEC)
    cpu = probe_cpu(PLAN, cpu_model(model))
    cpuinfo = write_cpuinfo(cpu, tmp_path / f"cpuinfo-{model}", os.cpu_count() or 1)
    wrappers = Wrappers(
        folder=tmp_path / f"bin-{model}", plan=PLAN, venv=venv, cpuinfo=cpuinfo, cpu=cpu,
        binds=(tmp_path,),
    )  # fmt: skip
    wrappers.write()
    return wrappers


@pytest.mark.parametrize(("model", "bf16"), [("max", True), ("neoverse-n1", False)])
def test_the_emulated_process_sees_the_models_cpuinfo(
    tmp_path: Path, model: str, bf16: bool
) -> None:
    venv = Path(f"/opt/vcb-test-venv-{model}")  # its own: the other model may run at once
    subprocess.run(["chroot", PLAN.path, f"/usr/bin/python{SPEC.python}", "-m", "venv",
                    "--without-pip", venv], check=True)  # fmt: skip
    host_cpuinfo = Path("/proc/cpuinfo").read_text()
    python = _wrappers(tmp_path, model, venv).python
    done = subprocess.run(
        [python, "-c", SHOW], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    machine, features = done.stdout.splitlines()[:2]
    assert machine == "aarch64"
    assert ("bf16" in features.split()) is bf16 and "asimddp" in features.split()
    assert Path("/proc/cpuinfo").read_text() == host_cpuinfo  # the host's is untouched


def test_torch_imports_under_qemu_with_the_written_cpuinfo(tmp_path: Path) -> None:
    site = PLAN.path / VENV_IN_ROOT.relative_to("/") / "lib" / f"python{SPEC.python}"
    if not (site / "site-packages" / "torch").is_dir():
        pytest.skip(f"no torch in {VENV_IN_ROOT} of the root: run verify of an aarch64 wheel first")
    python = _wrappers(tmp_path, "max", VENV_IN_ROOT).python
    code = "import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())"
    done = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "DEFAULT"  # -cpu max: 512-bit SVE, which torch calls so
