"""Source checks, atomic writes, the memory guard and wheel rewriting, without real builds."""

from __future__ import annotations

import base64
import contextlib
import csv
import gzip
import hashlib
import io
import signal
import tarfile
import zipfile
from pathlib import Path

import pytest

from toolchain.compile import compilation as compile_module
from toolchain.compile.compilation import MemoryGuard, Process, descendants
from toolchain.compile.sources import fetch_sdist
from toolchain.errors import SourceError
from toolchain.util.files import atomic_path, remove_stale_parts, tar_sha256, unpack_tar
from toolchain.util.units import GIB
from toolchain.wheelfile import drop_requirements, read_manifest, requires_dist, rewrite_wheel


def _tar_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_tar_hash_ignores_compression(tmp_path: Path) -> None:
    data = _tar_bytes({"oneDNN-3.13/README": b"hello"})
    plain, packed = tmp_path / "a.tar", tmp_path / "a.tar.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data, compresslevel=1))
    assert tar_sha256(plain) == tar_sha256(packed) == hashlib.sha256(data).hexdigest()


def test_unpack_takes_the_top_folder_and_reuses_a_finished_copy(tmp_path: Path) -> None:
    archive = tmp_path / "dep.tar"
    archive.write_bytes(_tar_bytes({"dep-1.0/include/x.h": b"#define X 1\n"}))
    target = tmp_path / "deps" / "dep-1.0"
    unpack_tar(archive, target, stamp="abc")
    assert (target / "include" / "x.h").read_text() == "#define X 1\n"
    (target / "include" / "x.h").write_text("changed")
    unpack_tar(archive, target, stamp="abc")
    assert (target / "include" / "x.h").read_text() == "changed", "same stamp: reused"
    unpack_tar(archive, target, stamp="other")
    assert (target / "include" / "x.h").read_text() == "#define X 1\n", "new stamp: unpacked anew"
    assert sorted(p.name for p in target.parent.iterdir()) == ["dep-1.0"]


@pytest.mark.parametrize("python", ["with the data filter", "before 3.11.4"])
def test_unpack_refuses_members_that_leave_the_folder(
    tmp_path: Path, python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if python == "before 3.11.4":  # Debian 12's python3 (3.11.2), which runs Debian's nox
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    good = tmp_path / "good.tar"
    good.write_bytes(_tar_bytes({"dep-1.0/a/b.h": b"ok"}))
    assert (unpack_tar(good, tmp_path / "good", stamp="s") / "a" / "b.h").read_bytes() == b"ok"
    up = tmp_path / "up.tar"
    up.write_bytes(_tar_bytes({"dep-1.0/ok": b"x", "dep-1.0/../../escaped": b"evil"}))
    with pytest.raises(SourceError, match="cannot be read as an archive"):
        unpack_tar(up, tmp_path / "up", stamp="s")
    assert not (tmp_path / "up").exists() and not (tmp_path.parent / "escaped").exists()
    absolute = tmp_path / "absolute.tar"  # the data filter strips the "/", the fallback refuses
    absolute.write_bytes(_tar_bytes({"dep-1.0/ok": b"x", str(tmp_path / "abs"): b"evil"}))
    with contextlib.suppress(SourceError):
        unpack_tar(absolute, tmp_path / "absolute", stamp="s")
    assert not (tmp_path / "abs").exists()


def _tar_of(members: list[tuple[str, str, bytes]]) -> bytes:
    """A tar of (name, symlink target or "", data) in this order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, link, data in members:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("python", ["with the data filter", "before 3.11.4"])
@pytest.mark.parametrize(
    "members",
    [
        # each link stays inside when read alone; together, c is the folder's parent
        [("d/b", ".", b""), ("d/a", "b/..", b""), ("d/c", "a/..", b""), ("d/c/escaped", "", b"e")],
        # links checked before the links they go through exist
        [("d/a", "c/..", b""), ("d/c", "e/..", b""), ("d/e", ".", b""), ("d/a/escaped", "", b"e")],
        # a chain that only leads out, left in the tree for the build to follow
        [("d/x", ".", b""), ("d/y", "x/..", b""), ("d/z", "y/..", b""), ("d/ok", "", b"ok")],
    ],
)
def test_unpack_cannot_be_escaped_through_a_chain_of_symlinks(
    tmp_path: Path, python: str, members: list[tuple[str, str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Issue #31 F11: the fallback unpacker checked each link alone, before any was made."""
    if python == "before 3.11.4":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    archive = tmp_path / "chain.tar"
    archive.write_bytes(_tar_of(members))
    with pytest.raises(SourceError, match="cannot be read as an archive"):
        unpack_tar(archive, tmp_path / "out" / "dep", stamp="s")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "out" / "escaped").exists()


def test_atomic_path_leaves_nothing_on_failure(tmp_path: Path) -> None:
    final = tmp_path / "out.whl"
    with pytest.raises(RuntimeError), atomic_path(final) as temporary:
        temporary.write_text("half")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
    with atomic_path(final) as temporary:
        temporary.write_text("whole")
    assert [p.name for p in tmp_path.iterdir()] == ["out.whl"]


def test_sdist_with_the_wrong_hash_is_refused(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "vllm-0.1.0.tar.gz").write_bytes(b"not the real sdist")
    with pytest.raises(SourceError, match=r"has sha256 .* the recipe expects 0000"):
        fetch_sdist(
            sdist="vllm-0.1.0.tar.gz",
            sha256="0" * 64,
            cache=tmp_path / "cache" / "x",
            index_url="http://127.0.0.1:9/simple",
            mirror=mirror,
        )
    assert not (tmp_path / "cache").exists()


def _proc(pid: int, parent: int, name: str, started: int) -> Process:
    return Process(pid=pid, parent=parent, name=name, rss_bytes=GIB, started=started)


def test_descendants_walk_the_whole_tree() -> None:
    table = [
        _proc(10, 1, "pip", 0),
        _proc(11, 10, "ninja", 1),
        _proc(12, 11, "cc1plus", 2),
        _proc(13, 11, "cc1plus", 3),
        _proc(99, 1, "sshd", 0),
    ]
    assert {p.pid for p in descendants(10, table)} == {11, 12, 13}


def test_memory_guard_pauses_the_youngest_compiler_and_resumes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(compile_module.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    guard = MemoryGuard(margin_bytes=1 * GIB, resume_bytes=3 * GIB)
    tree = [_proc(11, 10, "ninja", 1), _proc(12, 11, "cc1plus", 2), _proc(13, 11, "cc1plus", 3)]
    assert guard.step(8 * GIB, tree) is None
    message = guard.step(GIB // 2, tree)
    assert message is not None and "paused cc1plus 13" in message
    assert sent == [(13, signal.SIGSTOP)]
    assert guard.step(GIB // 2, tree) is None, "the last running compiler is never paused"
    assert guard.step(2 * GIB, tree) is None, "not yet enough memory to resume"
    message = guard.step(4 * GIB, tree)
    assert message is not None and "resumed 13" in message
    assert sent[-1] == (13, signal.SIGCONT)


def test_drop_requirements_matches_names_not_substrings() -> None:
    text = (
        "Name: vllm\nRequires-Dist: triton @ https://x/triton.whl ; platform_machine == 'x86_64'\n"
        "Requires-Dist: triton-kernels\nRequires-Dist: torch==2.13.0+cpu\n"
    )
    kept, dropped = drop_requirements(text, ["triton"])
    assert dropped == [
        "Requires-Dist: triton @ https://x/triton.whl ; platform_machine == 'x86_64'"
    ]
    assert "triton-kernels" in kept and "torch==2.13.0+cpu" in kept


def test_rewrite_embeds_the_manifest_with_a_valid_record(tmp_path: Path, make_wheel) -> None:
    comma = "vllm/configs/N=8192,K=1536,device_name=X.json"  # vLLM ships names like this
    wheel = make_wheel(
        tmp_path,
        "vllm",
        "0.1.0+cpu.portable",
        requires=("triton @ https://x/t.whl", "numpy"),
        files={"vllm/__init__.py": b"", comma: b"{}"},
    )
    dropped = rewrite_wheel(wheel, drop=["triton"], manifest={"target_isa": "portable"})
    assert dropped == ["Requires-Dist: triton @ https://x/t.whl"]
    assert requires_dist(wheel) == ["numpy"]
    assert read_manifest(wheel) == {"target_isa": "portable"}
    with zipfile.ZipFile(wheel) as archive:
        record = archive.read("vllm-0.1.0+cpu.portable.dist-info/RECORD").decode()
        rows = list(csv.reader(io.StringIO(record)))
        assert all(len(row) == 3 for row in rows) and comma in [row[0] for row in rows]
        for name, digest, size in rows:
            if not digest:
                continue
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == f"sha256={expected.decode()}" and int(size) == len(data)
    assert [p.name for p in tmp_path.iterdir()] == [wheel.name]


def test_runtime_requirements_pin_torch_and_say_what_is_left_out(
    tmp_path: Path, make_wheel
) -> None:
    from toolchain.runtime_deps import runtime_requirements

    wheel = make_wheel(
        tmp_path,
        "vllm",
        "0.1.0+cpu.portable",
        requires=(
            "numpy>=1.26",
            "torch==2.13.0+cpu; platform_machine == 'x86_64'",
            "torchvision; platform_machine != 'riscv64'",
            "triton @ https://x/t.whl ; platform_machine == 'x86_64'",
            "py-cpuinfo; platform_machine == 'aarch64'",
        ),
    )
    rewrite_wheel(wheel, drop=[], manifest={"toolchain": {"torch": "2.13.0+cpu"}})
    result = runtime_requirements(wheel, {"platform_machine": "x86_64"})
    assert result.install == ("torch==2.13.0+cpu", "numpy>=1.26")
    assert [req.split(";")[0].strip() for req, _ in result.left_out] == [
        "torchvision",
        "triton @ https://x/t.whl",
    ]
    assert "CUDA" in result.left_out[0][1] and "direct URL" in result.left_out[1][1]


@pytest.mark.integration
def test_a_killed_build_leaves_no_compiler_running(tmp_path: Path) -> None:
    """SIGTERM to the toolkit stops the compile's whole process group (resume is then safe)."""
    import os
    import subprocess
    import sys
    import time

    marker = "61.25"  # a sleep nobody else runs
    script = (
        "import os; from pathlib import Path; "
        "from toolchain.compile.compilation import MemoryGuard, compile_logged; "
        f"compile_logged(['sh', '-c', 'echo \"[1/2] one\"; sleep {marker}'], env=os.environ, "
        f"cwd=Path('{tmp_path}'), log=Path('{tmp_path}/build.log'), "
        "guard=MemoryGuard(margin_bytes=0, resume_bytes=0), interval=0.2)"
    )
    toolkit = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def sleepers() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and marker in (entry / "cmdline").read_text():
                    found.append(entry.name)
            except OSError:
                continue
        return [pid for pid in found if int(pid) != os.getpid()]

    try:
        deadline = time.monotonic() + 30
        log = tmp_path / "build.log"
        while not (log.exists() and "[1/2]" in log.read_text(errors="replace")):
            assert time.monotonic() < deadline, "the compile never started"
            time.sleep(0.1)
        assert sleepers(), "the compile's child is running"
        toolkit.terminate()
        assert toolkit.wait(timeout=30) != 0
        time.sleep(0.5)
        assert sleepers() == []
    finally:
        toolkit.kill()
        for pid in sleepers():
            os.kill(int(pid), 9)


def test_what_killed_writers_left_is_removed_and_a_running_writers_file_kept(
    tmp_path: Path,
) -> None:
    """Issue #31 F1: `.NAME.PID.part` of a pid no longer running is debris of a killed run."""
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can have it
    final = tmp_path / "oneDNN-3.13.tar.gz"
    names = [f".{final.name}.{dead}.part", f".{final.name}.{dead}.part.tar",
             f".{final.name}.1.part", f".{final.name}.{dead}.partial", "other.part"]  # fmt: skip
    for name in names:
        (tmp_path / name).write_text("")
    assert sorted(remove_stale_parts(final)) == [tmp_path / names[0], tmp_path / names[1]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
