"""A Debian root for another architecture, made once with debootstrap and qemu-user-static, kept
under the work folder and reused; its identity (every package and version) is recorded beside it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.emulate.models import RootSpec
from toolchain.errors import ToolMissingError, UnsupportedHostError
from toolchain.util import run
from toolchain.util.datafile import load_json
from toolchain.util.files import atomic_path
from toolchain.util.report import reporter

DEBIAN_MIRROR = "http://deb.debian.org/debian"
BINFMT = Path("/proc/sys/fs/binfmt_misc")
BINFMT_CONF = Path("/usr/lib/binfmt.d")
DPKG_QUERY = "${Package} ${Version} ${Architecture}\\n"


@dataclass(frozen=True, kw_only=True)
class RootPlan:
    spec: RootSpec
    path: Path  # the root itself; <path>.json records its identity
    mirror: str

    @property
    def record(self) -> Path:
        return self.path.with_name(self.path.name + ".json")

    def debootstrap_argv(self, into: Path) -> list[str | Path]:
        include = ",".join(self.spec.packages)
        return [
            "debootstrap",
            "--arch",
            self.spec.debian_arch,
            "--variant=minbase",
            f"--include={include}",
            self.spec.suite,
            into,
            self.mirror,
        ]


def plan_root(spec: RootSpec, work_dir: Path, mirror: str = "") -> RootPlan:
    """Where the root for `spec` lives: named by what it is made of, so a changed package list
    makes a new root instead of reusing one that lacks a package."""
    mirror = mirror or os.environ.get("DEBIAN_MIRROR", DEBIAN_MIRROR)
    made_of = json.dumps([spec.suite, spec.debian_arch, sorted(spec.packages)]).encode()
    name = f"{spec.suite}-{spec.debian_arch}-{hashlib.sha256(made_of).hexdigest()[:12]}"
    return RootPlan(spec=spec, path=work_dir / "emulated" / name, mirror=mirror)


def missing_tools(spec: RootSpec) -> list[str]:
    """What emulating `spec` needs that this machine lacks, each with how to get it."""
    missing = []
    if shutil.which(spec.qemu) is None:
        missing.append(f"{spec.qemu} (apt-get install qemu-user-static)")
    for tool in ("debootstrap", "unshare"):
        if shutil.which(tool) is None:
            missing.append(
                f"{tool} (apt-get install {tool if tool != 'unshare' else 'util-linux'})"
            )
    if os.geteuid() != 0:
        missing.append("root (debootstrap, chroot and mount need it: run verify with sudo)")
    return missing


def binfmt_flags(name: str, folder: Path = BINFMT) -> str | None:
    """The flags of a registered binfmt handler, None when it is not registered."""
    entry = folder / name
    if not entry.is_file():
        return None
    lines = entry.read_text().splitlines()
    if "enabled" not in lines[:1]:
        return None
    return next((line.split()[1] for line in lines if line.startswith("flags:")), "")


def ensure_binfmt(spec: RootSpec, folder: Path = BINFMT, conf_dir: Path = BINFMT_CONF) -> None:
    """qemu registered for the root's binaries with the F flag (the interpreter is opened when it
    is registered, so it works inside the chroot); registers Debian's entry when it is absent."""
    flags = binfmt_flags(spec.binfmt, folder)
    if flags is None:
        conf = conf_dir / f"{spec.binfmt}.conf"
        if not (folder / "register").exists() or not conf.is_file():
            raise UnsupportedHostError(
                f"binfmt_misc has no {spec.binfmt} entry and it cannot be registered here "
                f"({folder}/register or {conf} is missing)",
                hint="apt-get install qemu-user-static; mount -t binfmt_misc binfmt_misc "
                f"{folder}; then run verify again",
            )
        reporter.line(f"+ registering {conf} with binfmt_misc")
        # FileExistsError: another process (a second verify) registered it in the meantime
        with contextlib.suppress(FileExistsError):
            (folder / "register").write_text(conf.read_text().strip() + "\n")
        flags = binfmt_flags(spec.binfmt, folder) or ""
    if "F" not in flags:
        raise UnsupportedHostError(
            f"binfmt_misc's {spec.binfmt} entry lacks the F flag (flags: {flags or 'none'}): "
            "its interpreter cannot be found inside the root",
            hint=f"echo -1 > {folder}/{spec.binfmt}; then run verify again (it registers "
            "Debian's entry, which has F)",
        )


def ensure_root(plan: RootPlan, log: Path) -> dict[str, Any]:
    """The root, made when absent (into a .partial folder, renamed when complete); its record."""
    if not (plan.path / "usr" / "bin" / f"python{plan.spec.python}").is_file():
        if shutil.which("debootstrap") is None:
            raise ToolMissingError("debootstrap was not found", hint="apt-get install debootstrap")
        partial = plan.path.with_name(plan.path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        reporter.heading(f"emulated root: debootstrap {plan.spec.suite} {plan.spec.debian_arch}")
        run.run_logged(plan.debootstrap_argv(partial), log=log, what="debootstrap")
        shutil.rmtree(plan.path, ignore_errors=True)
        partial.rename(plan.path)
        plan.record.unlink(missing_ok=True)
    if not plan.record.is_file():
        _write_record(plan)
    record: dict[str, Any] = load_json(plan.record)
    return record


def _write_record(plan: RootPlan) -> None:
    packages = run.capture(
        ["dpkg-query", f"--admindir={plan.path}/var/lib/dpkg", "-W", f"-f={DPKG_QUERY}"],
        timeout=120,
    ).stdout
    listing = "".join(sorted(packages.splitlines(keepends=True)))
    record = {
        "suite": plan.spec.suite,
        "arch": plan.spec.debian_arch,
        "mirror": plan.mirror,
        "requested": list(plan.spec.packages),
        "packages": listing.splitlines(),
        "identity": "sha256:" + hashlib.sha256(listing.encode()).hexdigest(),
    }
    with atomic_path(plan.record) as temporary:
        temporary.write_text(json.dumps(record, indent=2) + "\n")
