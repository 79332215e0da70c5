"""Publishing under faults: kills at random points, two writers at once, a full disk, a wheel
folder changed after publishing, names taken from a manifest. The index always validates."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.errors import PublishError
from toolchain.publish import index as index_module
from toolchain.publish.index import publish_index
from toolchain.publish.index_check import validate

pytestmark = pytest.mark.integration


def _wheels(folder: Path, make_wheel: Callable[..., Path], *versions: str, size: int = 0) -> Path:
    payload = {"vcbdemo/data.bin": os.urandom(size)} if size else None
    for version in versions:
        files = {"vcbdemo/__init__.py": b"", **(payload or {})}
        make_wheel(folder, "vcbdemo", version, files=files)
    return folder


def _leftovers(root: Path) -> list[str]:
    places = [root.parent, root.parent / f".{root.name}.generations"]
    return sorted(
        p.name for place in places if place.is_dir() for p in place.iterdir()
        if p.name.endswith((".part", ".link"))
    )  # fmt: skip


def test_kill_9_at_random_points_never_breaks_the_index(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    root = tmp_path / "index"
    wheels = _wheels(tmp_path / "w", make_wheel, "1.0+cpu.avx2", "1.0+cpu.portable", size=4 << 20)
    command = [sys.executable, "-m", "toolchain", "publish", "--wheel-dir", str(wheels),
               "--index-dir", str(root)]  # fmt: skip
    started = time.monotonic()
    subprocess.run(command, check=True, capture_output=True, cwd=tmp_path)
    duration = time.monotonic() - started
    chooser = random.Random(12)
    for round_ in range(8):
        make_wheel(wheels, "vcbdemo", f"1.{round_ + 1}+cpu.avx2")  # a new generation each time
        process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(chooser.uniform(0.0, duration))
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert root.is_symlink() and validate(root.resolve()) == [], f"round {round_}"
    subprocess.run(command, check=True, capture_output=True, cwd=tmp_path)
    assert validate(root.resolve()) == [] and _leftovers(root) == []


def test_a_second_publish_waits_and_never_deletes_what_the_index_points_to(
    tmp_path: Path, make_wheel: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "index"
    first = _wheels(tmp_path / "a", make_wheel, "1.0+cpu.avx2")
    second = _wheels(tmp_path / "b", make_wheel, "2.0+cpu.avx2")
    publish_index(sorted(first.glob("*.whl")), root)  # an older generation, to be pruned
    _wheels(first, make_wheel, "1.1+cpu.avx2")
    swapped, release = threading.Event(), threading.Event()
    prune = index_module._prune

    def held_prune(*args: object, **kwargs: object) -> None:
        if threading.current_thread().name == "A":
            swapped.set()  # A has swapped its generation in and holds the lock
            assert release.wait(30)
        prune(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(index_module, "_prune", held_prune)
    results: dict[str, object] = {}

    def publish(name: str, folder: Path) -> None:
        results[name] = publish_index(sorted(folder.glob("*.whl")), root)

    a = threading.Thread(target=publish, args=("A", first), name="A")
    a.start()
    assert swapped.wait(30)
    b = threading.Thread(target=publish, args=("B", second), name="B")
    b.start()
    time.sleep(1.0)
    assert "B" not in results, "B waits for A's lock instead of writing beside it"
    a_generation = root.resolve()
    release.set()
    a.join(30)
    b.join(30)
    assert root.resolve() != a_generation and root.resolve().is_dir()
    assert validate(root.resolve()) == []
    assert a_generation.is_dir(), "A's generation is B's previous one: kept for its readers"


def test_the_served_wheel_does_not_change_when_the_wheel_folder_does(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    root = tmp_path / "index"
    wheels = _wheels(tmp_path / "w", make_wheel, "1.0+cpu.avx2")
    published = publish_index(sorted(wheels.glob("*.whl")), root)
    wheel = next(wheels.glob("*.whl"))
    with wheel.open("r+b") as handle:  # overwritten in place, as `cp` does
        handle.write(b"PK garbage")
    assert validate(published.generation) == []


@pytest.mark.parametrize("target", ["../../../escape", "/abs/path", "a/b", ".hidden"])
def test_a_manifest_cannot_make_publish_write_outside_the_index(
    tmp_path: Path, make_wheel: Callable[..., Path], target: str
) -> None:
    manifest = json.dumps({"target_isa": target, "min_isa": []}).encode()
    wheel = make_wheel(tmp_path / "w", "vcbdemo", "1.0+cpu.avx2",
                       extra_info={"vllm_cpu_builder.json": manifest})  # fmt: skip
    with pytest.raises(PublishError, match="is not a variant name"):
        publish_index([wheel], tmp_path / "out" / "index")
    assert not (tmp_path / "escape").exists() and not (tmp_path / "out").exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs: a real full disk (needs root, as on the CI machines)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8); CI runs as root")
    folder = tmp_path / "disk"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_fails_clearly_and_keeps_the_previous_index(
    tmp_path: Path, small_disk: Path, make_wheel: Callable[..., Path], capsys
) -> None:
    root = small_disk / "index"
    small = _wheels(tmp_path / "small", make_wheel, "1.0+cpu.avx2")
    assert main(["publish", "--wheel-dir", str(small), "--index-dir", str(root)]) == 0
    before = root.resolve()
    big = _wheels(tmp_path / "big", make_wheel, "2.0+cpu.avx2", size=4 << 20)
    shutil.copy(next(small.glob("*.whl")), big)
    assert main(["publish", "--wheel-dir", str(big), "--index-dir", str(root)]) == 12
    err = capsys.readouterr().err
    assert "could not write the index" in err and "nothing was changed" in err
    assert "Traceback" not in err
    assert root.resolve() == before and validate(before) == []
    assert _leftovers(root) == []
