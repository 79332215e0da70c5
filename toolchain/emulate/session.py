"""Running Python inside the emulated root: the emulated CPU's features, the /proc/cpuinfo written
from them, and `python` / `vllm` wrappers that the checks run as if they were a venv's.

Each wrapper enters a private mount namespace (`unshare --mount`: the host's /proc is untouched),
mounts a new /proc with the written cpuinfo over /proc/cpuinfo (torch's CPU-info init segfaults on
an x86 cpuinfo), binds /dev, /sys and the folders the checks pass paths in, turns core dumps off (a
SIGILL would dump one) and runs the venv's program with QEMU_CPU set: binfmt's F flag starts qemu,
which reads QEMU_CPU, in every process, vLLM's workers included. Stand-in libraries are preloaded
by `env` inside the root: the host's unshare would try to preload the root's path itself.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from toolchain.emulate.models import CpuModel, cpuinfo_text
from toolchain.emulate.root import RootPlan
from toolchain.errors import UnsupportedHostError
from toolchain.util import run
from toolchain.util.files import atomic_path

AUXV = (
    "import ctypes; libc = ctypes.CDLL(None); libc.getauxval.restype = ctypes.c_ulong; "
    "libc.getauxval.argtypes = [ctypes.c_ulong]; print(libc.getauxval(16), libc.getauxval(26))"
)  # AT_HWCAP, AT_HWCAP2

ENTER = """\
set -eu
root=$1 cpuinfo=$2 cpu=$3 preload=$4 cwd=$5
shift 5
while [ "$1" != -- ]; do mkdir -p "$root$1"; mount --rbind "$1" "$root$1"; shift; done
shift
mount -t proc proc "$root/proc"
mount --bind "$cpuinfo" "$root/proc/cpuinfo"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
ulimit -c 0
unset LD_PRELOAD LD_LIBRARY_PATH PYTHONHOME VIRTUAL_ENV
export QEMU_CPU="$cpu" HOME=/root LANG=C.UTF-8 PATH="$(dirname "$1"):/usr/bin:/bin"
if [ -n "$preload" ]; then set -- /usr/bin/env "LD_PRELOAD=$preload" "$@"; fi
exec unshare --root "$root" --wd "$cwd" "$@"
"""


@dataclass(frozen=True, kw_only=True)
class EmulatedCpu:
    model: CpuModel
    hwcap: int
    hwcap2: int


def probe_cpu(plan: RootPlan, model: CpuModel) -> EmulatedCpu:
    """The HWCAP words the kernel would give a process on this model, as qemu gives them."""
    python = f"/usr/bin/python{plan.spec.python}"
    env = {**os.environ, "QEMU_CPU": model.qemu_cpu}
    output = run.capture(["chroot", plan.path, python, "-c", AUXV], env=env, timeout=120)
    try:
        hwcap, hwcap2 = (int(word) for word in output.stdout.split())
    except ValueError as exc:
        raise UnsupportedHostError(
            f"{plan.spec.qemu} -cpu {model.qemu_cpu} did not report its features "
            f"({output.stdout.strip() or 'no output'})",
            hint="check `QEMU_CPU=max chroot ROOT python3 -V` by hand",
        ) from exc
    return EmulatedCpu(model=model, hwcap=hwcap, hwcap2=hwcap2)


def write_cpuinfo(cpu: EmulatedCpu, path: Path, cpus: int) -> Path:
    with atomic_path(path) as temporary:
        temporary.write_text(cpuinfo_text(cpu.model, cpu.hwcap, cpu.hwcap2, cpus))
    return path


@dataclass(frozen=True, kw_only=True)
class Wrappers:
    """Where the wrappers and their entry script go, and what they enter."""

    folder: Path
    plan: RootPlan
    venv: Path  # inside the root
    cpuinfo: Path
    cpu: EmulatedCpu
    binds: tuple[Path, ...]
    preload: str = ""  # inside the root: stand-in libraries, "" for none

    @property
    def python(self) -> Path:
        return self.folder / "python"

    def write(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        enter = self.folder / "enter.sh"
        with atomic_path(enter) as temporary:
            temporary.write_text(ENTER)
        for name in ("python", "vllm"):
            self._write_wrapper(name, enter)
        return self.python

    def _write_wrapper(self, name: str, enter: Path) -> None:
        args = [
            "unshare", "--mount", "/bin/sh", str(enter), str(self.plan.path), str(self.cpuinfo),
            self.cpu.model.qemu_cpu, self.preload,
        ]  # fmt: skip
        binds = [str(path) for path in self.binds]
        text = (
            "#!/bin/sh\n"
            f"# {name} of {self.venv} in {self.plan.path}, under "
            f"{self.plan.spec.qemu} -cpu {self.cpu.model.qemu_cpu} (written by verify)\n"
            f'exec {shlex.join(args)} "$PWD" {shlex.join(binds)} -- '
            f'{shlex.quote(str(self.venv / "bin" / name))} "$@"\n'
        )
        path = self.folder / name
        with atomic_path(path) as temporary:
            temporary.write_text(text)
            temporary.chmod(0o755)
