"""`kernel-tests`: reading pytest's XML, the comparison, the sampling and chunks, the tests'
unpacking and the rerun of a killed chunk, with fake pytest processes (no vLLM, no torch)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import pytest

from toolchain.cli import main
from toolchain.errors import ProcessFailedError, UsageError
from toolchain.verify import kernel_tests as kt
from toolchain.verify.bench import Side
from toolchain.verify.junit import MISSING, Case, junit_key, read_junit
from toolchain.verify.kernel_tests import (
    Chunk,
    parse_collected,
    plan_chunks,
    release_of,
    run_chunk,
    sample_ids,
    unpack_tests,
)
from toolchain.verify.kernel_tests_report import (
    counts,
    differences,
    missing,
    render_counts,
    render_differences,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "junit"
TOY = "tests/kernels/test_toy.py"
ACT = "tests/kernels/core/test_cpu_activation.py"
ATTN = "tests/kernels/attention/test_cpu_attn.py"


def test_pytests_own_xml_reads_back_as_one_outcome_per_node_id() -> None:
    # pytest 9.2.0's --junitxml of tests/fixtures/junit/test_toy.py.txt, run for these ids
    ids = [
        f"{TOY}::test_pass[1]",
        f"{TOY}::TestGroup::test_in_class[fp8_e4m3::x]",
        f"{TOY}::test_fail",
        f"{TOY}::test_skip",
        f"{TOY}::test_error",
        f"{TOY}::test_xfail",
        f"{TOY}::TestGroup::test_in_class[bf16]",
        f"{TOY}::test_pass[2]",  # not in that run
    ]
    cases = read_junit(FIXTURES / "pytest-9.2.0.xml", ids)
    assert cases is not None
    assert {n.partition("::")[2]: c.outcome for n, c in cases.items()} == {
        "test_pass[1]": "passed",
        "TestGroup::test_in_class[fp8_e4m3::x]": "failed",
        "test_fail": "failed",
        "test_skip": "skipped",
        "test_error": "error",
        "test_xfail": "xfailed",
        "TestGroup::test_in_class[bf16]": "passed",
        "test_pass[2]": "missing",
    }
    assert cases[f"{TOY}::test_fail"].message == (
        "AssertionError: Unsupported CPU attention configuration: isa=1"
    )
    assert (
        cases[f"{TOY}::test_error"].message == 'failed on setup with "RuntimeError: fixture broke'
    )
    assert cases[f"{TOY}::test_skip"].message == "needs AMX"
    # the XML was written: the message must not say it was not
    assert "not in its pytest process's XML" in cases[f"{TOY}::test_pass[2]"].message


def test_a_node_id_maps_to_pytests_classname_and_name() -> None:
    assert junit_key(f"{ATTN}::test_varlen[True-bf16-a/b::c]") == (
        "tests.kernels.attention.test_cpu_attn",
        "test_varlen[True-bf16-a/b::c]",
    )
    assert junit_key(f"{TOY}::TestGroup::test_in_class[x]") == (
        "tests.kernels.test_toy.TestGroup",
        "test_in_class[x]",
    )


@pytest.mark.parametrize("content", [None, "", '<?xml version="1.0"?><testsuites><testsu'])
def test_no_xml_or_a_cut_off_one_is_no_results(tmp_path: Path, content: str | None) -> None:
    xml = tmp_path / "a.xml"
    if content is not None:
        xml.write_text(content)
    assert read_junit(xml, [f"{TOY}::test_fail"]) is None


def _case(outcome: str, message: str = "") -> Case:
    return Case(outcome=outcome, message=message)


def test_the_same_outcomes_agree_and_a_different_or_missing_one_is_listed() -> None:
    ids = [f"{ACT}::a", f"{ACT}::b", f"{ATTN}::c", f"{ATTN}::d"]
    a = {ids[0]: _case("passed"), ids[1]: _case("skipped"), ids[2]: _case("failed", "isa=1")}
    a[ids[3]] = _case("passed")
    assert differences(ids, {"A": a, "B": dict(a)}) == []
    b = {**a, ids[2]: _case("passed"), ids[3]: MISSING}
    found = differences(ids, {"A": a, "B": b})
    assert [d.node_id for d in found] == [ids[2], ids[3]]
    assert found[0].cases["A"].message == "isa=1"
    assert missing(ids, {"A": a, "B": b}) == {"A": 0, "B": 1}
    text = render_differences(found)
    assert f"{ids[2]}\n  A: failed: isa=1\n  B: passed" in text
    assert f"{ids[3]}\n  A: passed\n  B: missing: no result" in text


def test_counts_are_per_file_and_the_table_shows_each_side() -> None:
    ids = [f"{ACT}::a", f"{ACT}::b", f"{ATTN}::c"]
    a = {ids[0]: _case("passed"), ids[1]: _case("skipped"), ids[2]: _case("error")}
    b = {ids[0]: _case("passed"), ids[1]: _case("passed"), ids[2]: _case("error")}
    assert counts(ids, a)[ACT] == {
        "passed": 1, "failed": 0, "error": 0, "skipped": 1, "xfailed": 0, "missing": 0,
    }  # fmt: skip
    table = render_counts(ids, {"A": a, "B": b}).splitlines()
    assert table[0].split() == ["file", "wheel", "passed", "failed", "error", "skipped"]
    assert table[1].split() == [ACT, "A", "1", "0", "0", "1"]
    assert table[2].split() == ["B", "2", "0", "0", "0"]
    assert table[3].split() == [ATTN, "A", "0", "0", "1", "0"]


def test_a_sample_is_the_same_cases_whatever_the_collection_order() -> None:
    ids = [f"{ATTN}::test_attn[{i}]" for i in range(2774)]
    first = sample_ids(ids, 100)
    assert first == sample_ids(list(reversed(ids)), 100)
    assert 95 <= len(first) <= 100
    assert len(set(first)) == len(first) and set(first) <= set(ids)
    assert sample_ids(ids, 100, seed=7) != first
    whole = sample_ids(ids, None)
    assert sorted(whole) == sorted(ids) and whole != sorted(ids), "all of them, shuffled"
    assert whole[:: -(-2774 // 100)] == first, "every k-th of the same shuffle"
    assert len(sample_ids(ids[:10], 100)) == 10
    assert len(sample_ids(ids, 1)) == 1


def test_chunks_hold_at_most_the_size_and_every_case_once_numbered_across_files() -> None:
    collected = {
        ACT: [f"{ACT}::t[{i}]" for i in range(58)],
        ATTN: [f"{ATTN}::t[{i}]" for i in range(120)],
    }
    chunks = plan_chunks(collected, sample=None, size=50)
    assert [(c.index, c.file, len(c.node_ids)) for c in chunks] == [
        (1, ACT, 50), (2, ACT, 8), (3, ATTN, 50), (4, ATTN, 50), (5, ATTN, 20),
    ]  # fmt: skip
    ran = [n for c in chunks for n in c.node_ids]
    assert sorted(ran) == sorted(collected[ACT] + collected[ATTN])
    assert all(n.startswith(c.file + "::") for c in chunks for n in c.node_ids)
    sampled = plan_chunks(collected, sample=30, size=50)
    assert [len(c.node_ids) for c in sampled] == [29, 30]


def test_collected_ids_are_grouped_by_file_and_other_lines_ignored() -> None:
    stdout = f"{ACT}::a[x]\n{ACT}::b\n{ATTN}::c\nother.py::d\n\n3 tests collected in 1.2s\n"
    assert parse_collected(stdout, [ACT, ATTN]) == {
        ACT: [f"{ACT}::a[x]", f"{ACT}::b"],
        ATTN: [f"{ATTN}::c"],
    }


def _sdist(path: Path, files: dict[str, bytes]) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return path


def test_only_the_sdists_tests_are_unpacked_with_no_vllm_beside_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    sdist = _sdist(
        tmp_path / "vllm-0.1.0.tar.gz",
        {
            "vllm-0.1.0/vllm/__init__.py": b"",
            "vllm-0.1.0/pyproject.toml": b"",
            "vllm-0.1.0/tests/__init__.py": b"",
            "vllm-0.1.0/tests/kernels/core/test_cpu_activation.py": b"def test_x(): pass\n",
            "vllm-0.1.0/testsuite/x.py": b"",
        },
    )
    root = unpack_tests(sdist, tmp_path / "work" / "vllm-0.1.0")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [".vcb-unpacked", "tests/__init__.py", f"{ACT}"]
    assert not (root / "vllm").exists()


def test_an_sdist_without_tests_or_a_vllm_on_pythonpath_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    bare = _sdist(tmp_path / "bare.tar.gz", {"vllm-0.1.0/vllm/__init__.py": b""})
    with pytest.raises(UsageError, match="has no tests/ folder"):
        unpack_tests(bare, tmp_path / "bare")
    checkout = tmp_path / "checkout"
    (checkout / "vllm").mkdir(parents=True)
    (checkout / "vllm" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    sdist = _sdist(tmp_path / "s.tar.gz", {"vllm-0.1.0/tests/__init__.py": b""})
    with pytest.raises(UsageError, match="instead of the wheel's vLLM"):
        unpack_tests(sdist, tmp_path / "s")


def test_a_test_file_the_sdist_lacks_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "tests" / "kernels" / "core").mkdir(parents=True)
    (tmp_path / ACT).write_text("")
    kt.check_files(tmp_path, [ACT])
    with pytest.raises(UsageError, match=r"has no tests/kernels/test_cpu_attn\.py"):
        kt.check_files(tmp_path, [ACT, "tests/kernels/test_cpu_attn.py"])


def test_a_test_file_is_named_as_in_the_node_ids_pytest_prints(tmp_path: Path) -> None:
    files = kt.normalized_files([f"./{ACT}", ATTN, f"{ACT}"])
    assert files == (ACT, ATTN)
    stdout = f"{ACT}::a[x]\n{ATTN}::c\n\n2 tests collected\n"
    assert parse_collected(stdout, files) == {ACT: [f"{ACT}::a[x]"], ATTN: [f"{ATTN}::c"]}
    for outside in ("/etc/passwd", "tests/../../x.py"):
        with pytest.raises(UsageError, match="not a path inside the sdist"):
            kt.normalized_files([outside])


def test_the_release_is_metadatas_version_without_the_local_part(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    lean = make_wheel(tmp_path / "a", "vllm", "0.32.0+cpu.avx2")
    portable = make_wheel(tmp_path / "b", "vllm", "0.32.0+cpu.portable")
    assert release_of([lean, portable]) == "0.32.0"
    other = make_wheel(tmp_path / "c", "vllm", "0.34.0+cpu.avx2")
    with pytest.raises(UsageError, match="different vLLM releases"):
        release_of([lean, other])


@dataclass
class FakePytest:
    """A pytest process that has already ended: its exit status, and the XML it wrote."""

    returncode: int
    pid: int = 0

    def wait(self) -> int:
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode


def _xml(outcomes: Mapping[str, str]) -> str:
    cases = []
    for node_id, outcome in outcomes.items():
        classname, name = junit_key(node_id)
        inner = {"failed": '<failure message="boom"/>', "skipped": '<skipped message="no"/>'}
        cases.append(
            f"<testcase classname={quoteattr(classname)} name={quoteattr(name)}>"
            f"{inner.get(outcome, '')}</testcase>"
        )
    return f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>"


@dataclass
class FakeRunner:
    """Starts fake pytest processes: each side answers from its script, one answer per start
    (an int alone: killed by that signal or ended without XML; else the outcome per case)."""

    script: dict[str, list[Any]]
    started: list[tuple[str, list[str]]]

    def __call__(
        self, argv: Sequence[str | Path], log: Path, env: Mapping[str, str], cwd: Path
    ) -> FakePytest:
        side = Path(str(argv[0])).parts[-4]  # .../kernel-tests/a/venv/bin/python
        ids = Path(str(argv[-1]).removeprefix("@")).read_text().split()
        self.started.append((side, ids))
        assert env["OMP_NUM_THREADS"] == "1" and "-p" in argv and "no:cacheprovider" in argv
        answer = self.script[side].pop(0)
        if isinstance(answer, int):
            return FakePytest(returncode=answer)
        xml = Path(next(str(a) for a in argv if str(a).startswith("--junitxml=")).partition("=")[2])
        xml.write_text(_xml({n: answer.get(n, "passed") for n in ids}))
        return FakePytest(returncode=1 if "failed" in answer.values() else 0)


def _sides(work: Path) -> list[Side]:
    return [
        Side(label=label, name=f"{label}.whl", python=work / label.lower() / "venv/bin/python")
        for label in "AB"
    ]


def test_a_chunk_killed_by_a_signal_runs_again_alone(tmp_path: Path, capsys) -> None:
    chunk = Chunk(index=3, file=ACT, node_ids=(f"{ACT}::a", f"{ACT}::b"))
    runner = FakeRunner(script={"a": [{f"{ACT}::b": "skipped"}], "b": [-9, {}]}, started=[])
    runs = run_chunk(
        chunk, _sides(tmp_path / "kernel-tests"), tmp_path / "chunks", tmp_path, runner
    )
    assert [side for side, _ in runner.started] == ["a", "b", "b"], "B again, and B alone"
    assert runs["B"].cases is not None and runs["B"].returncode == 0
    assert runs["A"].cases == {f"{ACT}::a": _case("passed"), f"{ACT}::b": _case("skipped", "no")}
    assert "B: no results (killed by SIGKILL)" in capsys.readouterr().out
    assert runs["A"].summary().startswith("A: 1 passed 1 skipped, ")


def test_a_chunk_killed_twice_is_no_result_never_a_pass(tmp_path: Path) -> None:
    chunk = Chunk(index=1, file=ACT, node_ids=(f"{ACT}::a",))
    (tmp_path / "chunks").mkdir()
    (tmp_path / "chunks" / "b-001.xml").write_text(_xml({f"{ACT}::a": "passed"}))  # a stale one
    runner = FakeRunner(script={"a": [{}], "b": [-9, -9]}, started=[])
    runs = run_chunk(
        chunk, _sides(tmp_path / "kernel-tests"), tmp_path / "chunks", tmp_path, runner
    )
    assert runs["B"].cases is None and runs["B"].killed
    assert len(runner.started) == 3, "rerun once, not again"


def test_a_whole_run_compares_case_by_case_and_writes_the_report(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_wheel: Callable[..., Path],
    fake_recipes: Callable[..., Path],
    capsys,
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    sdist = _sdist(
        tmp_path / "mirror" / "vllm-0.1.0.tar.gz",
        {f"vllm-0.1.0/{ACT}": b"", f"vllm-0.1.0/{ATTN}": b""},
    )
    rest = '[build]\nrequires = []\nmemory_per_job_mib = 256\n[toolchain]\ncmake_min = "3.18"\n'
    recipes = fake_recipes(tmp_path, sdist=sdist, python="3.11", rest=rest)
    wheels = [make_wheel(tmp_path / s, "vllm", f"0.1.0+cpu.{s}") for s in ("avx2", "portable")]
    ids = {ACT: [f"{ACT}::t[{i}]" for i in range(7)], ATTN: [f"{ATTN}::u[{i}]" for i in range(5)]}
    work = tmp_path / "work"
    fails = {f"{ACT}::t[3]": "failed"}
    script = {"a": [{}, {}, {}, {}], "b": [fails, fails, -9, fails, fails]}
    runner = FakeRunner(script=script, started=[])
    monkeypatch.setattr(kt, "prepare_side", lambda label, spec, folder, sources, log: Side(
        label=label, name=Path(spec).name, python=folder / "venv" / "bin" / "python"
    ))  # fmt: skip
    monkeypatch.setattr(kt, "install_test_requirements", lambda *args: None)
    monkeypatch.setattr(kt, "collect", lambda python, root, files, log: {f: ids[f] for f in files})
    monkeypatch.setattr(kt, "start_logged", runner)
    report = tmp_path / "report.json"
    code = main(
        ["kernel-tests", *map(str, wheels), "--sources", str(sdist.parent), "--recipes",
         str(recipes), "--work-dir", str(work), "--chunk", "4", "--report", str(report)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "[chunk 1/4] A: 4 passed, " in out and "[chunk 4/4] A: 1 passed, " in out
    assert "[chunk 3] B: no results (killed by SIGKILL)" in out
    assert [side for side, _ in runner.started] == ["a", "b"] * 3 + ["b"] + ["a", "b"]
    assert f"1 case(s) whose outcome differs:\n{ACT}::t[3]\n  A: passed\n  B: failed: boom" in out
    data = json.loads(report.read_text())
    assert data["vllm"] == "0.1.0" and data["agree"] is False
    assert data["counts"]["B"][ACT]["failed"] == 1 and data["missing"] == {"A": 0, "B": 0}
    assert len(data["cases"]) == 12 and data["unfinished_chunks"] == []
    assert [d["node_id"] for d in data["differences"]] == [f"{ACT}::t[3]"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".report")) == []


def test_each_chunk_is_a_pytest_process_of_its_own_with_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[list[str], dict[str, Any]]] = []

    class Popen:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            started.append((argv, kwargs))
            self.pid = 0

        def poll(self) -> int:
            return -9

        def wait(self) -> int:
            return -9

    monkeypatch.setattr(subprocess, "Popen", Popen)
    side = Side(label="A", name="a.whl", python=Path(sys.executable))
    chunk = Chunk(index=2, file=ACT, node_ids=(f"{ACT}::a", f"{ACT}::b"))
    runs = run_chunk(chunk, [side], tmp_path / "chunks", tmp_path, kt.start_logged)
    argv, kwargs = started[0]
    assert argv[1:] == ["-m", "pytest", "-q", "--rootdir=.", "-p", "no:cacheprovider",
                        f"--junitxml={tmp_path / 'chunks' / 'a-002.xml'}",
                        f"@{tmp_path / 'chunks' / 'chunk-002.txt'}"]  # fmt: skip
    assert (tmp_path / "chunks" / "chunk-002.txt").read_text() == f"{ACT}::a\n{ACT}::b\n"
    assert kwargs["env"]["OMP_NUM_THREADS"] == "1" and kwargs["cwd"] == tmp_path
    assert len(started) == 2 and runs["A"].cases is None


def test_collection_runs_pytest_in_as_venv_and_a_failed_one_stops_the_run(
    tmp_path: Path, fake_programs: Any
) -> None:
    printed = f"{ACT}::a\n{ACT}::b\n\n2 tests collected in 3.1s\n"
    fake_programs.add("python", printed)
    log = tmp_path / "kernel-tests.log"
    assert kt.collect(Path("python"), tmp_path, [ACT], log) == {ACT: [f"{ACT}::a", f"{ACT}::b"]}
    assert fake_programs.calls[0][1:] == [
        "-m", "pytest", "--collect-only", "-q", "--rootdir=.", "-p", "no:cacheprovider", ACT,
    ]  # fmt: skip
    fake_programs.add("python", "ERROR tests/kernels/core/test_cpu_activation.py\n", 2)
    with pytest.raises(ProcessFailedError, match="could not collect the tests \\(exit 2\\)"):
        kt.collect(Path("python"), tmp_path, [ACT], log)
    assert "ERROR tests/kernels" in log.read_text()


def _result(outcomes: dict[str, dict[str, Case]], ids: list[str]) -> kt.KernelTestResult:
    return kt.KernelTestResult(
        sides=tuple(Side(label=s, name=f"{s}.whl", python=Path("python")) for s in outcomes),
        release="0.32.0",
        sdist="vllm-0.32.0.tar.gz",
        files=(ACT,),
        sample=None,
        chunk_size=50,
        node_ids=tuple(ids),
        outcomes=outcomes,
        unfinished=(),
        seconds=1.0,
    )


def test_one_wheel_passes_when_every_case_has_a_result_whatever_it_is() -> None:
    ids = [f"{ACT}::a", f"{ACT}::b"]
    assert _result({"A": {ids[0]: _case("failed"), ids[1]: _case("skipped")}}, ids).agree
    lacking = _result({"A": {ids[0]: _case("passed"), ids[1]: MISSING}}, ids)
    assert not lacking.agree and lacking.to_json()["missing"] == {"A": 1}


def test_the_sdist_of_a_release_without_a_recipe_is_the_mirrors_with_a_warning(
    tmp_path: Path, fake_recipes: Callable[..., Path], capsys
) -> None:
    from toolchain.compile.sources import release_sdist
    from toolchain.errors import SourceError

    known = _sdist(tmp_path / "known" / "vllm-0.1.0.tar.gz", {"vllm-0.1.0/tests/x.py": b""})
    rest = '[build]\nrequires = []\nmemory_per_job_mib = 256\n[toolchain]\ncmake_min = "3.18"\n'
    recipes = fake_recipes(tmp_path, sdist=known, python="3.11", rest=rest)
    mirror = tmp_path / "mirror"
    newer = _sdist(mirror / "vllm-0.2.0.tar.gz", {"vllm-0.2.0/tests/x.py": b""})
    where = {"recipes_dir": recipes, "cache_root": tmp_path / "sdists", "mirror": mirror}
    assert release_sdist("0.2.0", index_url="http://127.0.0.1:9/simple", **where) == newer
    assert "no recipe records its sha256" in capsys.readouterr().out
    (mirror / "vllm-0.1.0.tar.gz").write_bytes(b"not the release")
    with pytest.raises(SourceError, match="the recipe expects"):
        release_sdist("0.1.0", index_url="http://127.0.0.1:9/simple", **where)
