"""Finding this process's cgroup folders, for cgroup v2, v1, and the hybrid of both."""

from __future__ import annotations

from pathlib import Path


def read_int(path: Path) -> int | None:
    """An integer file, or None when it is absent or says "max"."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


def cgroup_dirs(controller: str, proc_self_cgroup: Path, cgroup_root: Path) -> list[Path]:
    """Folders that can limit `controller` for this process, innermost first."""
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return []
    unified = (
        cgroup_root if (cgroup_root / "cgroup.controllers").exists() else cgroup_root / "unified"
    )
    found: list[Path] = []
    for line in lines:
        _, controllers, rel = [*line.split(":", 2), "", ""][:3]
        if controllers == "":
            base = unified
        elif controller in controllers.split(","):
            base = cgroup_root / controllers
        else:
            continue
        folder = base / rel.lstrip("/")
        found.append(folder)
        while folder != base and base in folder.parents:
            folder = folder.parent
            found.append(folder)
    return found
