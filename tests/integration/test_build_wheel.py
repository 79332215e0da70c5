"""build-wheel end to end on a tiny vLLM-like package: sources, venv, compile, repair, deliver."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.detect.memory import read_memory
from toolchain.util.files import tar_sha256
from toolchain.util.units import MIB
from toolchain.wheelfile import read_manifest, requires_dist

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAKE_DNNL_H = "#define FAKE_DNNL_ANSWER 42\n"


def _tar_gz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def _fake_sdist(path: Path) -> Path:
    source = FIXTURES / "fake-vllm"
    files = {
        f"vllm-0.1.0/{p.relative_to(source)}": p.read_bytes()
        for p in sorted(source.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    return _tar_gz(path, files)


@pytest.fixture
def fake_release(
    tmp_path: Path, make_wheel: Callable[..., Path], fake_recipes: Callable[..., Path]
) -> dict[str, Path]:
    """A recipe folder, a source mirror and a torch folder for a fake vLLM 0.1.0."""
    # torch 2.13.0+cpu stand-in: what the build venv checks (version, not CUDA), nothing else
    torch_init = b"__version__ = '2.13.0+cpu'\n\nclass version:\n    cuda = None\n"
    torch = make_wheel(
        tmp_path / "torch", "torch", "2.13.0+cpu", files={"torch/__init__.py": torch_init}
    )
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    sdist = _fake_sdist(mirror / "vllm-0.1.0.tar.gz")
    dnnl = _tar_gz(
        mirror / "fakednn-1.0.tar.gz", {"fakednn-1.0/include/fake_dnnl.h": FAKE_DNNL_H.encode()}
    )
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    recipes = fake_recipes(
        tmp_path,
        sdist=sdist,
        python=python,
        rest=f"""
index = "http://127.0.0.1:9/simple"
[build]
requires = ["setuptools", "wheel", "cmake", "ninja"]
memory_per_job_mib = 256
[toolchain]
gxx_min = {{ x86_64 = "9" }}
cmake_min = "3.18"
[[third_party]]
name = "fakednn"
repository = "https://example.invalid/fakednn.git"
ref = "v1.0"
archive = "fakednn-1.0.tar.gz"
tar_sha256 = "{tar_sha256(dnnl)}"
env = "FETCHCONTENT_SOURCE_DIR_ONEDNN"
[[drop_requirements]]
name = "triton"
reason = "a direct URL"
[[patches]]
file = "patches/fake.patch"
versions = "==0.1.0"
reason = "proves patches reach the build"
""",
    )
    (recipes / "patches").mkdir()
    shutil.copy(FIXTURES / "fake-vllm.patch", recipes / "patches" / "fake.patch")
    return {
        "recipes": recipes,
        "mirror": mirror,
        "torch": torch.parent,
        "work": tmp_path / "work",
        "wheels": tmp_path / "wheels",
    }


def _build_args(paths: dict[str, Path], *extra: str) -> list[str]:
    return [
        "build-wheel",
        "--recipes",
        str(paths["recipes"]),
        "--vllm",
        "0.1.0",
        "--sources",
        str(paths["mirror"]),
        "--find-links",
        str(paths["torch"]),
        "--work-dir",
        str(paths["work"]),
        "--wheel-dir",
        str(paths["wheels"]),
        "--cxx",
        shutil.which("g++") or "g++",
        *extra,
    ]


@pytest.mark.integration
@pytest.mark.skipif(
    shutil.which("g++") is None or not Path("/usr/include/numa.h").is_file(),
    reason="needs g++ and libnuma-dev (.ci/run installs them)",
)
def test_fake_vllm_builds_into_a_tagged_repaired_wheel(
    fake_release: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NINJA_STATUS", "%p ")  # a user's own ninja status must not hide progress
    assert main(_build_args(fake_release, "--jobs", "1")) == 0
    out = capsys.readouterr().out
    wheels = sorted(fake_release["wheels"].glob("*.whl"))
    assert [w.name.split("-")[1] for w in wheels] == ["0.1.0+cpu.portable"]
    wheel = wheels[0]
    assert "manylinux" in wheel.name, "auditwheel repaired and retagged it"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = json.loads(archive.read("vllm/_build_info.json"))
    assert info == {"max_jobs": "1", "target_device": "cpu"}
    assert any("libnuma" in name for name in names), "libnuma is bundled by auditwheel"
    assert not any(r.startswith("triton") for r in requires_dist(wheel))
    embedded = read_manifest(wheel)
    assert embedded is not None
    assert embedded["target_isa"] == "portable" and embedded["min_isa"] == ["avx2", "f16c"]
    assert embedded["third_party"][0]["name"] == "fakednn"
    assert embedded["toolchain"]["cmake"] and embedded["toolchain"]["torch"] == "2.13.0+cpu"
    gxx = Path(shutil.which("g++") or "g++").resolve()
    assert embedded["toolchain"]["cxx_sha256"] == hashlib.sha256(gxx.read_bytes()).hexdigest()
    assert embedded["patches"][0]["file"] == "fake.patch"
    origin = embedded["settings_origin"]  # where each setting came from (#34)
    assert origin["jobs"] == "flag" and origin["build_type"] == "default", origin
    sidecar = json.loads((wheel.parent / f"{wheel.name}.manifest.json").read_text())
    assert sidecar["wheel_sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert sidecar["jobs"]["max_jobs"] == 1
    assert sidecar["compile"]["steps"] >= 2, "the progress counter read ninja's [done/total]"
    assert sidecar["compile"]["cpu_seconds"] > 0, "the compilers' CPU time was counted"
    assert (sidecar["build_type"], sidecar["debug_info"]) == ("Release", None)
    assert sidecar["build_tree_bytes"] > 10 * 2**20, "the build venv alone takes more"
    trace = json.loads((wheel.parent / f"{wheel.name}.trace.json").read_text())
    assert any(e["name"].endswith(".o") and e["ph"] == "X" for e in trace), "a compile timeline"
    assert "compile timeline: " in out
    assert sidecar["env"]["CMAKE_BUILD_TYPE"] == "Release"
    assert not _debug_sections(wheel), "a Release build has no debug info"
    assert "sha256  " + sidecar["wheel_sha256"] in out
    assert not list(fake_release["wheels"].glob(".*")), "no temporary files left behind"

    venv = tmp_path / "check-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(wheel)], check=True
    )
    answer = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import vllm; print(vllm.kernel_answer(), vllm.PATCHED)",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert answer.stdout.strip() == "42 True"

    # A second run reuses the checked source, the unpacked mirror and the build venv.
    assert main(_build_args(fake_release, "--jobs", "1")) == 0
    again = capsys.readouterr().out
    assert "cached at" in again and "reusing" in again and "already applied" in again

    # A changed recipe patch goes onto a fresh unpack, not onto the tree patched before.
    patch = fake_release["recipes"] / "patches" / "fake.patch"
    patch.write_text(patch.read_text().replace("+PATCHED = True", "+PATCHED = 2"))
    assert main(_build_args(fake_release, "--jobs", "1")) == 0
    assert "patches changed since this tree was patched" in capsys.readouterr().out
    (init,) = fake_release["work"].glob("builds/*/src/vllm/__init__.py")
    assert "PATCHED = 2" in init.read_text() and "PATCHED = True" not in init.read_text()


def _debug_sections(wheel: Path) -> list[str]:
    """The DWARF and debuglink sections of the wheel's kernel library."""
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as folder:
        library = Path(folder) / "_C.abi3.so"
        library.write_bytes(archive.read("vllm/_C.abi3.so"))
        return _sections(library)


def _sections(library: Path) -> list[str]:
    shown = subprocess.run(
        ["readelf", "-S", "-W", str(library)], check=True, capture_output=True, text=True
    ).stdout
    return sorted(set(re.findall(r"\.(?:debug_info|gnu_debuglink)\b", shown)))


@pytest.mark.integration
def test_debug_info_goes_into_a_separate_archive(
    fake_release: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(_build_args(fake_release, "--jobs", "1", "--build-type", "RelWithDebInfo")) == 0
    out = capsys.readouterr().out
    (wheel,) = fake_release["wheels"].glob("*.whl")
    debug = fake_release["wheels"] / f"{wheel.name}.debug.tar.gz"
    assert f"debug info: {debug}" in out
    assert _debug_sections(wheel) == [".gnu_debuglink"], "stripped, and naming its debug file"
    with tarfile.open(debug) as tar:
        assert tar.getnames() == ["vllm/_C.abi3.so.debug"]
        member = tar.extractfile("vllm/_C.abi3.so.debug")
        assert member is not None
        (tmp_path / "_C.abi3.so.debug").write_bytes(member.read())
    assert ".debug_info" in _sections(tmp_path / "_C.abi3.so.debug")
    sidecar = json.loads((wheel.parent / f"{wheel.name}.manifest.json").read_text())
    assert sidecar["build_type"] == "RelWithDebInfo"
    assert sidecar["debug_info"] == {
        "file": debug.name,
        "sha256": hashlib.sha256(debug.read_bytes()).hexdigest(),
        "size_bytes": debug.stat().st_size,
    }
    with zipfile.ZipFile(wheel) as archive:
        mode = archive.getinfo("vllm/_C.abi3.so").external_attr >> 16
    assert mode & 0o444 == 0o444, "the stripped library stays readable by everyone"


@pytest.mark.integration
@pytest.mark.skipif(
    shutil.which("g++") is None or not Path("/usr/include/numa.h").is_file(),
    reason="needs g++ and libnuma-dev (.ci/run installs them)",
)
def test_headers_and_a_level_the_cmake_never_took_are_said_and_not_recorded(
    fake_release: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The fake release's top project is not vllm_extensions: vllm-libraries.cmake never runs."""
    assert main(_build_args(fake_release, "--jobs", "1", "--precompiled-headers")) == 0
    out = capsys.readouterr().out
    assert "no lean <torch/all.h> for _C, _C_AVX512, _C_AVX2: vLLM's CMake never read" in out
    assert "no precompiled torch headers for _C, _C_AVX512, _C_AVX2" in out
    assert "never read vllm-libraries.cmake (is its top project vllm_extensions?)" in out
    assert "compiled at CMake's level for Release, not -O2" in out
    (wheel,) = fake_release["wheels"].glob("*.whl")
    sidecar = json.loads((wheel.parent / f"{wheel.name}.manifest.json").read_text())
    assert sidecar["precompiled_headers"] == [] and sidecar["lean_torch_headers"] == []
    assert sidecar["torch_headers"] == "full" and sidecar["opt_level"] == "O3"


def test_missing_mirror_file_stops_before_compiling(
    no_probe: None,
    fake_release: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    fake_programs,
) -> None:
    (fake_release["mirror"] / "fakednn-1.0.tar.gz").unlink()
    fake_programs.add("g++", "12.2.0\n")
    fake_programs.add("python3.11", "")
    fake_programs.add("patch", "patching file vllm/__init__.py\n")
    code = main([*_build_args(fake_release)[:-2], "--python", "3.11"])
    err = capsys.readouterr().err
    assert code == 8
    assert "fakednn-1.0.tar.gz is missing (expected tar sha256" in err
    assert "Traceback" not in err


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A real Redis on a loopback port, as a build farm's shared compile cache."""
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server (apt-get install redis-server; .ci/run installs it)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _elsewhere(paths: dict[str, Path], where: Path) -> dict[str, Path]:
    """The same release built on another machine: its own work folder and wheel folder."""
    return {**paths, "work": where / "work", "wheels": where / "wheels"}


def _cache_facts(paths: dict[str, Path]) -> object:
    (wheel,) = paths["wheels"].glob("*.whl")
    return json.loads((wheel.parent / f"{wheel.name}.manifest.json").read_text())["compile_cache"]


@pytest.mark.integration
def test_a_shared_cache_serves_a_second_machine(
    fake_release: dict[str, Path],
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    assert main(_build_args(fake_release, "--jobs", "1", "--cache", redis_url)) == 0
    first = _cache_facts(fake_release)
    assert isinstance(first, dict) and first["used"] and first["hits"] == 0
    assert first["misses"] >= 1 and first["errors"] == 0
    assert f"compile cache {redis_url}: 0 hits, {first['misses']} misses" in capsys.readouterr().out
    # another machine: a fresh work folder, so no local cache and no build folder to resume
    second = _elsewhere(fake_release, tmp_path / "second")
    assert main(_build_args(second, "--jobs", "1", "--cache", redis_url)) == 0
    expected = {**first, "hits": first["misses"], "misses": 0}
    assert _cache_facts(second) == expected
    assert f"compile cache {redis_url}: {first['misses']} hits, 0 misses" in capsys.readouterr().out


@pytest.mark.integration
def test_a_dead_cache_warns_once_and_the_build_goes_on(
    fake_release: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dead = "redis://127.0.0.1:9"
    assert main(_build_args(fake_release, "--jobs", "1", "--cache", dead)) == 0
    out = capsys.readouterr().out
    assert out.count(f"warning: the compile cache {dead} cannot be used") == 1
    facts = _cache_facts(fake_release)
    assert isinstance(facts, dict) and facts["used"] is False and facts["why_not"]


@pytest.mark.integration
def test_compiles_go_to_the_build_servers(
    fake_release: dict[str, Path], dist_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_build_args(fake_release, "--jobs", "1", "--dist-scheduler", dist_cluster)) == 0
    out = capsys.readouterr().out
    facts = _cache_facts(fake_release)
    assert isinstance(facts, dict) and facts["used"]
    assert facts["distributed"] >= 1 and facts["dist_errors"] == 0, out
    assert f"{facts['distributed']} compiled on build servers" in out
    sidecar = next(fake_release["wheels"].glob("*.manifest.json")).read_text()
    assert "test-client-token" not in sidecar and "test-client-token" not in out
    # this build's own file: another test process may be running a build with its own
    conf = Path(json.loads(sidecar)["env"]["SCCACHE_CONF"])
    assert conf.parent == Path(tempfile.gettempdir()) and not conf.exists(), "the token is gone"


@pytest.mark.integration
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a light pool needs 2 CPUs")
def test_light_units_run_together_and_heavy_ones_after_them(
    fake_release: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recipe = fake_release["recipes"] / "vllm-0.1.0.toml"
    text = recipe.read_text().replace("memory_per_job_mib = 256", "memory_per_job_mib = 2048")
    recipe.write_text(
        text + '[[compile_memory]]\nwhat = "fake oneDNN"\ntargets = ["fakednn_*"]\npeak_mib = 64\n'
        'pool = "light"\n'
    )
    memory = read_memory()
    available_mib = memory.usable_bytes // MIB
    if available_mib < 4096:
        pytest.skip("needs 4 GiB available")
    # the plan sizes the jobs from this reading: another test process may take or free memory
    monkeypatch.setattr("toolchain.detect.host.read_memory", lambda *args, **kwargs: memory)
    # a reserve that leaves this machine room for one 2 GiB job and a half: flat sizing says 1
    reserve = available_mib - 3072
    assert main(_build_args(fake_release, "--reserve-mib", str(reserve))) == 0
    cpus = len(os.sched_getaffinity(0))
    assert f"(fake oneDNN {cpus} at a time" in capsys.readouterr().out
    (build,) = fake_release["work"].glob("builds/*/src/build/temp*")
    ninja = (build / "CMakeFiles" / "rules.ninja").read_text()
    assert f"pool vcb_light\n  depth = {cpus}" in ninja and "pool vcb_heavy\n  depth = 1" in ninja
    spans = {}  # output: (start ms, end ms), from ninja's log
    for line in (build / ".ninja_log").read_text().splitlines()[1:]:
        start, end, _, output, _ = line.split("\t")
        spans[output] = (int(start), int(end))
    light = sorted(span for out, span in spans.items() if "fakednn_ops.dir" in out)
    assert len(light) == 3 and light[1][0] < light[0][1], "two light units ran at once"
    archive_end = next(end for out, (_, end) in spans.items() if out.endswith("fakednn_ops.a"))
    heavy_start = next(start for out, (start, _) in spans.items() if "_C.dir" in out)
    assert heavy_start >= archive_end, "the heavy unit waited for the light ones"
    (wheel,) = fake_release["wheels"].glob("*.whl")
    sidecar = json.loads((wheel.parent / f"{wheel.name}.manifest.json").read_text())
    assert [(p["name"], p["jobs"]) for p in sidecar["jobs"]["pools"]] == [
        ("light", cpus),
        ("heavy", 1),
    ]
    assert isinstance(sidecar["compile"]["unit_memory"]["by_target"], dict)
