"""verify's check registry: checks are found by their files, run in order, skipped with reasons."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from toolchain.detect.host import detect_host
from toolchain.verify.checks import Check
from toolchain.verify.context import Context
from toolchain.verify.flow import Verification, VerifyOptions, _run_check
from toolchain.verify.registry import CHECK_NAMES, load_checks
from toolchain.verify.results import PASS, SKIP, CheckResult

CHECK_FILE = """
from toolchain.verify.checks import Check
from toolchain.verify.results import PASS, CheckResult

CHECK = Check(
    name={name!r},
    order={order},
    needs={needs!r},
    run=lambda ctx: CheckResult(name={name!r}, status=PASS, summary="ran"),
)
"""


def test_the_checks_run_in_the_order_the_report_has_always_had() -> None:
    assert CHECK_NAMES == (
        "install",
        "symbols",
        "isa",
        "numerics",
        "import",
        "threads",
        "generate",
        "memory",
        "spawn",
        "serve",
    )


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> str:
    """A package of check files, under a name no other test imported."""
    name = f"extra_checks_{tmp_path.name.replace('-', '_')}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for module, text in files.items():
        (package / f"{module}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in [name, *(f"{name}.{m}" for m in files)]:
        monkeypatch.delitem(sys.modules, module, raising=False)
    return name


def test_a_new_check_is_one_file_placed_by_its_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _package(
        tmp_path,
        monkeypatch,
        {
            "alpha": CHECK_FILE.format(name="alpha", order=20, needs=("beta",)),
            "beta": CHECK_FILE.format(name="beta", order=10, needs=()),
        },
    )
    assert [c.name for c in load_checks(package)] == ["beta", "alpha"]


def test_a_check_that_needs_a_later_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _package(
        tmp_path,
        monkeypatch,
        {
            "alpha": CHECK_FILE.format(name="alpha", order=10, needs=("beta",)),
            "beta": CHECK_FILE.format(name="beta", order=20, needs=()),
        },
    )
    with pytest.raises(ValueError, match=r"alpha needs \['beta'\], which do not run before it"):
        load_checks(package)


def test_a_module_without_a_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _package(tmp_path, monkeypatch, {"helpers": "VALUE = 1\n"})
    with pytest.raises(TypeError, match=r"extra_checks_\w+.helpers has no CHECK"):
        load_checks(package)


def _context(tmp_path: Path, cpuinfo_file, *, emulated: bool) -> Context:
    host = detect_host(cpuinfo_file=cpuinfo_file("x86-zen4"))
    options = VerifyOptions(work_dir=tmp_path, project=tmp_path, only=("mine",))
    state = Verification(options=options, host=host, emulation={} if emulated else None)
    return Context(state=state, facts={}, env={}, clean=tmp_path, manifest=None)


def _never(ctx: Context) -> CheckResult:
    raise AssertionError("a skipped check ran")


@pytest.mark.parametrize("emulated", [True, False])
def test_a_check_not_for_an_emulated_root_is_skipped_there_with_its_reason(
    tmp_path: Path, cpuinfo_file, fake_programs, emulated: bool
) -> None:
    context = _context(tmp_path, cpuinfo_file, emulated=emulated)
    ran = CheckResult(name="mine", status=PASS, summary="ran")
    check = Check(name="mine", order=1, run=lambda ctx: ran, emulated="too slow under qemu")
    _run_check(context, check)
    expected = SKIP if emulated else PASS
    assert [(r.status, r.summary) for r in context.state.results] == [
        (expected, "too slow under qemu" if emulated else "ran")
    ]
    assert context.results["mine"].status == expected


def test_a_check_whose_skip_gives_a_reason_is_not_run(
    tmp_path: Path, cpuinfo_file, fake_programs
) -> None:
    context = _context(tmp_path, cpuinfo_file, emulated=False)
    check = Check(name="mine", order=1, run=_never, skip=lambda ctx: "nothing to check")
    _run_check(context, check)
    assert [(r.name, r.status, r.summary) for r in context.state.results] == [
        ("mine", SKIP, "nothing to check")
    ]


def test_a_check_not_asked_for_is_neither_run_nor_reported(
    tmp_path: Path, cpuinfo_file, fake_programs
) -> None:
    context = _context(tmp_path, cpuinfo_file, emulated=False)
    _run_check(context, Check(name="other", order=1, run=_never))
    assert context.state.results == [] and context.results == {}
