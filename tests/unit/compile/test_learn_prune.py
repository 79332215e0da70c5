"""learn-prune on a fake finished build: a trimmed build.ninja shaped like a portable build's
(three kernel libraries link libdnnl.a, one library does not) and the link map each relink
writes (tests/fixtures/onednn-prune/). ninja and the (cross) g++ are fakes: nothing compiles."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import FakePrograms
from toolchain.cli import main
from toolchain.compile.learn_prune import built_with_acl
from toolchain.compile.ninja_file import read_builds
from toolchain.compile.onednn_prune import (
    archive_build,
    cmake_cache_entry,
    kernel_libraries,
    learn,
    link_command,
)
from toolchain.errors import BuildError
from toolchain.plan.onednn_callers import CPU_EXTENSION, _hunks, callers_digest
from toolchain.plan.recipes import load_recipe

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "onednn-prune"
RECIPES = Path(__file__).resolve().parents[3] / "recipes"
ARCHIVE = "/work/build/.deps/onednn-build/src/libdnnl.a"
LIBRARIES = ("_C.abi3.so", "_C_AVX2.abi3.so", "_C_AVX512.abi3.so")
NO_MEMBERS = (
    "Archive member included to satisfy reference by file (symbol)\n\nDiscarded input sections\n"
)
NONE_TAKES = [
    # a source outside its target's folder: named as prune-onednn.cmake computes it
    "dnnl_common ../../third_party/ittnotify/jitprofiling.c",
    "dnnl_common rnn.cpp",
    "dnnl_cpu rnn/ref_rnn.cpp",
    "dnnl_cpu_x64 jit_avx512_core_amx_conv_kernel.cpp",
]


def _finished_build(folder: Path, libraries: tuple[str, ...] = LIBRARIES) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "build.ninja", folder)
    for library in libraries:
        (folder / library).write_bytes(b"\x7fELF")
    return folder


def _fake_link(fakes: FakePrograms, compiler: str = "aarch64-linux-gnu-g++-12") -> list[str]:
    """ninja answers `-t commands LIB` with a compile and LIB's link by `compiler`; the fake
    compiler writes the fixture's link map where -Wl,-Map says. Returns the libraries linked."""
    cxx = fakes.add(compiler, answer=lambda argv: _write_map(argv, linked))
    linked: list[str] = []

    def commands(argv: list[str]) -> tuple[int, str]:
        library = argv[-1]
        return 0, (
            f"{cxx} -c x.cpp -o x.o\n"
            f": && {cxx} -fPIC -O3 -shared -o {library} CMakeFiles/_C.dir/a.cpp.o {ARCHIVE} "
            f'-Wl,--no-as-needed,"/venv/torch/lib/libtorch.so" -Wl,--as-needed && :\n'
        )

    fakes.add("ninja", answer=commands)
    return linked


def _write_map(argv: list[str], linked: list[str]) -> tuple[int, str]:
    out = Path(argv[argv.index("-o") + 1])
    link_map = next(Path(a.removeprefix("-Wl,-Map=")) for a in argv if a.startswith("-Wl,-Map="))
    assert out.parent == link_map.parent and out.parent.name.startswith("vcb-relink-")
    assert "-Wl,--no-as-needed,/venv/torch/lib/libtorch.so" in argv  # the shell's quotes gone
    fixture = FIXTURES / f"{out.name}.map"  # a library without one takes nothing from oneDNN
    link_map.write_text(fixture.read_text() if fixture.is_file() else NO_MEMBERS)
    linked.append(out.name)
    return 0, ""


def test_ninja_statements_are_read_across_continued_lines() -> None:
    builds = read_builds((FIXTURES / "build.ninja").read_text())
    made = archive_build(builds)
    assert made.outputs == (ARCHIVE,) and made.rule == "CXX_STATIC_LIBRARY_LINKER__dnnl_Release"
    assert len([p for p in made.inputs if p.endswith(".o")]) == 10
    assert made.order_only[0].endswith("/dnnl_common")
    avx512 = next(b for b in builds if b.outputs == ("_C_AVX512.abi3.so",))
    assert avx512.implicit == ("/venv/torch/lib/libc10.so", ARCHIVE)
    assert kernel_libraries(builds, ARCHIVE) == LIBRARIES  # not spinloop.abi3.so


def test_a_unit_is_left_out_only_when_no_library_takes_it(
    tmp_path: Path, fake_programs: FakePrograms
) -> None:
    linked = _fake_link(fake_programs)
    learned = learn(_finished_build(tmp_path / "temp"))
    assert sorted(linked) == sorted(LIBRARIES)
    assert learned.libraries == LIBRARIES
    # brgemm_matmul is taken by _C_AVX512 only, the AVX2 copy kernel by _C_AVX2 only: both kept
    assert list(learned.left_out) == NONE_TAKES
    assert (learned.units, learned.kept, learned.listed_before) == (10, 6, 0)


def test_one_named_library_is_all_that_is_relinked(
    tmp_path: Path, fake_programs: FakePrograms
) -> None:
    linked = _fake_link(fake_programs)
    learned = learn(_finished_build(tmp_path / "temp"), ["_C_AVX2.abi3.so"])
    assert linked == ["_C_AVX2.abi3.so"]
    assert "dnnl_cpu_x64 matmul/brgemm_matmul.cpp" in learned.left_out
    assert "dnnl_cpu_x64 gemm/f32/jit_avx2_f32_copy_an_kern_autogen.cpp" not in learned.left_out


def test_a_build_that_already_left_units_out_keeps_them_out(
    tmp_path: Path, fake_programs: FakePrograms
) -> None:
    _fake_link(fake_programs)
    temp = _finished_build(tmp_path / "temp")
    earlier = tmp_path / "recipe-files" / "old.txt"
    earlier.parent.mkdir()
    earlier.write_text("# the recipe's list\ndnnl_cpu_x64 jit_avx512_core_fp16_kernel.cpp\n")
    (temp / "CMakeCache.txt").write_text(f"X:BOOL=ON\nVCB_ONEDNN_SKIP:UNINITIALIZED={earlier}\n")
    learned = learn(temp)
    assert learned.left_out == tuple(sorted([*NONE_TAKES, earlier.read_text().split("\n")[1]]))
    assert (learned.units, learned.kept, learned.listed_before) == (11, 6, 1)
    earlier.unlink()
    with pytest.raises(BuildError, match="which is gone"):
        learn(temp)


def test_a_cmake_cache_entry_is_read_whatever_its_type(tmp_path: Path) -> None:
    assert cmake_cache_entry(tmp_path, "ONEDNN_AARCH64_USE_ACL") is None  # no cache
    assert built_with_acl(tmp_path, "aarch64") is None
    (tmp_path / "CMakeCache.txt").write_text(
        "// ONEDNN_AARCH64_USE_ACL:BOOL=OFF is a comment\nONEDNN_AARCH64_USE_ACL:BOOL=ON\r\n"
        "VCB_ONEDNN_SKIP:UNINITIALIZED=/r/list.txt \nEMPTY:STRING=\n"
    )
    assert cmake_cache_entry(tmp_path, "VCB_ONEDNN_SKIP") == "/r/list.txt"
    assert cmake_cache_entry(tmp_path, "EMPTY") == ""
    assert cmake_cache_entry(tmp_path, "ONEDNN") is None  # a whole name only
    assert built_with_acl(tmp_path, "aarch64") is True
    assert built_with_acl(tmp_path, "x86_64") is None


def test_an_unfinished_build_or_a_library_without_onednn_is_refused(
    tmp_path: Path, fake_programs: FakePrograms
) -> None:
    _fake_link(fake_programs)
    with pytest.raises(BuildError, match=r"_C_AVX512.abi3.so is missing: the build did not"):
        learn(_finished_build(tmp_path / "a", ("_C.abi3.so", "_C_AVX2.abi3.so")))
    temp = _finished_build(tmp_path / "b", ("spinloop.abi3.so",))
    with pytest.raises(BuildError, match=r"spinloop\.abi3\.so takes nothing from libdnnl\.a"):
        learn(temp, ["spinloop.abi3.so"])


def test_the_link_is_found_between_pre_and_post_link_steps() -> None:
    line = ": && cd /b && /usr/bin/g++ -shared -o _C.abi3.so a.o && cmake -E touch x && :"
    assert link_command(line, "_C.abi3.so") == [
        "/usr/bin/g++",
        "-shared",
        "-o",
        "_C.abi3.so",
        "a.o",
    ]
    with pytest.raises(BuildError, match="is not its link"):
        link_command("/usr/bin/g++ -c a.cpp -o a.o", "_C.abi3.so")


HELPER, HELPER_TEXT = "csrc/cpu/dnnl_helper.h", '#include "oneapi/dnnl/dnnl.hpp"\n'


def _work_dir(tmp_path: Path, target: str, arch: str) -> Path:
    work = tmp_path / "work"
    build = work / "builds" / f"vllm-0.32.0-{arch}-{target}-cp311"
    _finished_build(build / "src" / "build" / f"temp.linux-{arch}-cpython-311")
    return work


def test_learn_prune_writes_the_list_and_the_entry_that_loads(
    tmp_path: Path, fake_programs: FakePrograms, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command on a finished cross build of `bf16`: the list lands in the recipes folder
    with its header, and the printed [[onednn_prune]] lines, pasted, make the recipe load it."""
    _fake_link(fake_programs)
    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES, recipes)
    work = _work_dir(tmp_path, "bf16", "aarch64")
    helper = work / "builds" / "vllm-0.32.0-aarch64-bf16-cp311" / "src" / HELPER
    helper.parent.mkdir(parents=True)
    helper.write_text(HELPER_TEXT)
    cache = helper.parents[2] / "build" / "temp.linux-aarch64-cpython-311" / "CMakeCache.txt"
    cache.write_text("ONEDNN_AARCH64_USE_ACL:BOOL=OFF\n")  # a build without ACL (as cross builds)
    argv = ["learn-prune", "--vllm", "0.32.0", "--target", "bf16", "--work-dir", str(work)]
    assert main([*argv, "--recipes", str(recipes)]) == 0
    out = capsys.readouterr().out
    listed = recipes / "onednn-prune" / "vllm-0.32.0-aarch64-bf16.txt"
    text = listed.read_text()
    said = " ".join(line.removeprefix("# ") for line in text.splitlines() if line[:1] == "#")
    assert said.startswith("oneDNN units that vLLM 0.32.0's `bf16` build for aarch64 (oneDNN 9c5b")
    assert "never takes from libdnnl.a: 4 of 10 units left out, 6 kept." in said
    assert "_C.abi3.so, _C_AVX2.abi3.so, _C_AVX512.abi3.so" in text
    assert f"--target bf16 --arch aarch64 --work-dir {work}\n" in text
    assert [line for line in text.splitlines() if not line.startswith("#")] == NONE_TAKES
    assert not list(listed.parent.glob(".*part"))
    entry = out[out.index("[[onednn_prune]]") :]
    assert 'target = "bf16"\narch = "aarch64"\n' in entry
    assert 'file = "onednn-prune/vllm-0.32.0-aarch64-bf16.txt"\n' in entry
    assert "link 6 of its 10 units" in entry
    # no sdist cached in this work folder: the oneDNN callers of the build's own tree
    assert f'callers = "{callers_digest({HELPER: HELPER_TEXT})}"\nacl = false\n' in entry
    recipe_file = recipes / "vllm-0.32.0.toml"
    recipe_file.write_text(recipe_file.read_text() + "\n" + entry)
    recipe = load_recipe(recipes, "0.32.0")
    bf16 = recipe.isa_models["aarch64"].targets["bf16"]
    assert [
        (p.target, p.arch, p.units, p.acl) for p in recipe.onednn_prune if p.target == bf16.name
    ] == [("bf16", "aarch64", 4, False)]

    assert main([*argv, "--recipes", str(recipes)]) == 0  # again: the recipe names it now
    again = capsys.readouterr().out
    assert "entry names this file" in again and 'target = "bf16"' not in again


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--target", "avx2"], "no build of vLLM 0.32.0 'avx2' for x86_64 in"),
        (["--target", "neon", "--arch", "x86_64"], "vLLM 0.32.0 has no target 'neon' on x86_64"),
        (["--target", "sse4"], "vLLM 0.32.0 has no target 'sse4'"),
        ([], "learn-prune needs --target"),
    ],
)
def test_what_cannot_be_learned_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    work = _work_dir(tmp_path, "neon", "aarch64")
    assert main(["learn-prune", "--vllm", "0.32.0", "--work-dir", str(work), *extra]) in (2, 10)
    assert message in capsys.readouterr().err


def test_without_the_sdist_the_callers_are_the_trees_with_the_recipes_patches_taken_out(
    tmp_path: Path, fake_programs: FakePrograms, capsys: pytest.CaptureFixture[str]
) -> None:
    """No sdist cached: the build's unpacked tree carries the recipe's patches (0.32.0's cross
    patch changes oneDNN lines of cpu_extension.cmake), so its digest is taken with them taken
    back out: the sdist's, as new-recipe and build-wheel compute it."""
    _fake_link(fake_programs)
    recipe = load_recipe(RECIPES, "0.32.0")
    patch = next(p for p in recipe.patches if p.file.name == "vllm-0.32-cpu-arm-cross.patch")
    hunks = [h for h in _hunks(patch.content.decode()) if h[0] == CPU_EXTENSION]
    old, new = "".join(h[1] for h in hunks), "".join(h[2] for h in hunks)
    unpatched = callers_digest({HELPER: HELPER_TEXT, CPU_EXTENSION: old})
    assert callers_digest({HELPER: HELPER_TEXT, CPU_EXTENSION: new}) != unpatched
    work = _work_dir(tmp_path, "bf16", "aarch64")
    src = work / "builds" / "vllm-0.32.0-aarch64-bf16-cp311" / "src"
    (src / HELPER).parent.mkdir(parents=True)
    (src / HELPER).write_text(HELPER_TEXT)
    (src / CPU_EXTENSION).parent.mkdir(parents=True)
    (src / CPU_EXTENSION).write_text(new)
    to = tmp_path / "list.txt"
    argv = ["learn-prune", "--vllm", "0.32.0", "--target", "bf16", "--work-dir", str(work)]
    assert main([*argv, "--to", str(to)]) == 0
    assert f'callers = "{unpatched}"\n' in capsys.readouterr().out


def test_a_release_whose_list_is_inherited_gets_its_own_file(
    tmp_path: Path, fake_programs: FakePrograms, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.34.0 names 0.32.0's portable list (inherited_from): learning 0.34.0 writes its own
    file and prints the entry to put in place of the inherited one; the file 0.30.0 to 0.33.0
    name too stays as it was."""
    _fake_link(fake_programs)
    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES, recipes)
    shared = recipes / "onednn-prune" / "vllm-0.32.0-x86_64-portable.txt"
    before = shared.read_text()
    work = tmp_path / "work"
    build = work / "builds" / "vllm-0.34.0-x86_64-portable-cp312"
    _finished_build(build / "src" / "build" / "temp.linux-x86_64-cpython-312")
    argv = ["learn-prune", "--vllm", "0.34.0", "--target", "portable", "--arch", "x86_64"]
    assert main([*argv, "--work-dir", str(work), "--recipes", str(recipes)]) == 0
    out = capsys.readouterr().out
    assert shared.read_text() == before
    own = recipes / "onednn-prune" / "vllm-0.34.0-x86_64-portable.txt"
    assert "vLLM 0.34.0's `portable` build for x86_64" in own.read_text()
    assert 'file = "onednn-prune/vllm-0.34.0-x86_64-portable.txt"\n' in out
    assert "in place of" in out
