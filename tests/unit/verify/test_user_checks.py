"""lint-script and check-shadowing: the two traps a correct wheel still falls into."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.verify.shadowing import check_shadowing
from toolchain.verify.spawn_lint import lint_script


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.py"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("from vllm import LLM\nllm = LLM(model='m')\n", [2]),
        ("from vllm import LLM as Engine\nx = 1\nengine = Engine('m')\n", [3]),
        ("import vllm\nllm = vllm.LLM('m')\n", [2]),
        ("import vllm as v\nprint(v.LLM('m').generate('hi'))\n", [2]),
        (
            "from vllm.engine.async_llm_engine import AsyncLLMEngine\n"
            "e = AsyncLLMEngine.from_engine_args(args)\n",
            [2],
        ),
        ("from vllm import LLM\ndef make():\n    return LLM('m')\nllm = make()\n", [4]),
        (
            "from vllm import LLM\ndef a():\n    return LLM('m')\ndef b():\n    return a()\nb()\n",
            [6],
        ),
        ("from vllm import LLM\nclass Holder:\n    engine = LLM('m')\n", [3]),
        ("from vllm import LLM\nif True:\n    llm = LLM('m')\n", [3]),
        # issue #12: what the first version missed
        ("from vllm import LLM\nif __name__ != '__main__':\n    llm = LLM('m')\n", [3]),
        ("from vllm import LLM\nif __name__ == '__main__':\n    pass\nelse:\n    LLM('m')\n", [5]),
        ("from vllm import LLM\ndef run(engine=LLM('m')):\n    return engine\n", [2]),
        ("from vllm import LLM\n@register(LLM('m'))\ndef run():\n    pass\n", [2]),
        ("import vllm\nengine = getattr(vllm, 'LLM')('m')\n", [2]),
        ("exec(\"from vllm import LLM\\nLLM('m')\")\n", [1]),
        ("from vllm import *\nllm = LLM('m')\n", [2]),
        ("from vllm import LLM\nmake = lambda: LLM('m')\nllm = make()\n", [3]),
    ],
)
def test_engine_started_at_import_is_found(tmp_path: Path, source: str, lines: list[int]) -> None:
    assert [f.line for f in lint_script(_script(tmp_path, source))] == lines


@pytest.mark.parametrize(
    "source",
    [
        "from vllm import LLM\nif __name__ == '__main__':\n    llm = LLM('m')\n",
        "from vllm import LLM\ndef main():\n    LLM('m')\n"
        'if __name__ == "__main__":\n    main()\n',
        "from vllm import SamplingParams\nparams = SamplingParams(max_tokens=8)\n",
        "from mylib import LLM\nllm = LLM()\n",  # not vLLM's
        "import vllm\nclass Runner:\n    def start(self):\n        return vllm.LLM('m')\n",
        "# LLM('m') in a comment\ntext = \"LLM('m')\"\n",
        "from vllm import LLM\nmake = lambda: LLM('m')\n",  # a lambda body runs when called
        "from vllm import LLM\nif True:\n    def make():\n        return LLM('m')\n",
        "from vllm import LLM\nif __name__ != '__main__':\n    pass\nelse:\n    LLM('m')\n",
    ],
)
def test_guarded_or_unrelated_code_passes(tmp_path: Path, source: str) -> None:
    assert lint_script(_script(tmp_path, source)) == []


# issue #31 F10: each form the second review found missed (or wrongly flagged), both ways
STARTS_AT_IMPORT = [
    ("import importlib\nv = importlib.import_module('vllm')\nv.LLM('m')\n", [3]),
    ("import importlib\nimportlib.import_module('vllm').LLM('m')\n", [2]),
    (
        "from importlib import import_module\nimport_module(name='vllm.entrypoints.llm').LLM()\n",
        [2],
    ),
    ("v = __import__('vllm')\nv.LLM('m')\n", [2]),
    ("__import__('vllm').AsyncLLMEngine.from_engine_args(a)\n", [1]),
    ("from vllm import LLM as L\nL('m')\n", [2]),
    ("from vllm import AsyncLLMEngine as E\nE.from_engine_args(a)\n", [2]),
    ("import vllm\nE = vllm.LLM\nE('m')\n", [3]),
    ("from vllm import LLM\nL = LLM\nL('m')\n", [3]),
    ("from vllm import AsyncLLMEngine\nA: type = AsyncLLMEngine\nA.from_engine_args(a)\n", [3]),
    ("import vllm\nL, n = vllm.LLM, 3\nL('m')\n", [3]),
    ("from vllm import entrypoints\nentrypoints.llm.LLM('m')\n", [2]),
    ("import vllm\nE = getattr(vllm, 'LLM')\nF = E\nF('m')\n", [4]),
    ("import functools\nfrom vllm import LLM\nmake = functools.partial(LLM, 'm')\nmake()\n", [4]),
    ("from functools import partial\nfrom vllm import LLM\npartial(LLM, 'm')()\n", [3]),
    ("from vllm import LLM\n@(lambda f: LLM('m'))\ndef run():\n    pass\n", [2]),
    ("from vllm import LLM\n@(lambda f: LLM('m'))\nclass Run:\n    pass\n", [2]),
    ("from vllm import LLM\ndef deco(f):\n    return LLM('m')\n@deco\ndef run():\n    pass\n", [4]),
    ("from vllm import LLM\n(lambda: LLM('m'))()\n", [2]),
    ("from vllm import LLM\nif __name__ == '__main__' or DEBUG:\n    LLM('m')\n", [3]),
    (
        "from vllm import LLM\nif __name__ != '__main__' and X:\n    pass\nelse:\n    LLM('m')\n",
        [5],
    ),
    ("from vllm import LLM\nllm = None if __name__ == '__main__' else LLM('m')\n", [2]),
]
STAYS_QUIET = [
    "import importlib\nv = importlib.import_module('json')\nv.LLM('m')\n",
    "import importlib\nv = importlib.import_module('vllm')\n"
    "if __name__ == '__main__':\n    v.LLM()\n",
    "__import__('vllm')\n",
    "import vllm\nE = vllm.LLM\n",  # an alias that is never called
    "import vllm\nP = vllm.SamplingParams\nP(max_tokens=8)\n",
    "import functools\nfrom vllm import LLM\nmake = functools.partial(LLM, 'm')\n",
    "import functools\nfunctools.partial(print, 'LLM')()\n",
    "from vllm import LLM\n@(lambda f: f)\ndef run():\n    return LLM('m')\n",
    "def deco(f):\n    return f\n@deco\ndef run():\n    pass\n",
    "from vllm import LLM\nif __name__ == '__main__' and X:\n    LLM('m')\n",
    "from vllm import LLM\nif X and __name__ == '__main__' and Y:\n    LLM('m')\n",
    "from vllm import LLM\nif __name__ != '__main__' or X:\n    pass\nelse:\n    LLM('m')\n",
    "from vllm import LLM\nif not __name__ != '__main__':\n    LLM('m')\n",
    "from vllm import LLM\nllm = LLM('m') if __name__ == '__main__' else None\n",
    "from vllm import LLM\nif __name__ == '__main__':\n    L = LLM\n    L('m')\n",
    "a = b\nb = a\na()\nLLM = LLM\nLLM()\n",  # bindings that go round in a circle
]


@pytest.mark.parametrize(("source", "lines"), STARTS_AT_IMPORT)
def test_imports_aliases_partials_and_decorators_are_followed(
    tmp_path: Path, source: str, lines: list[int]
) -> None:
    assert [f.line for f in lint_script(_script(tmp_path, source))] == lines


@pytest.mark.parametrize("source", STAYS_QUIET)
def test_guards_with_more_conditions_and_harmless_aliases_pass(tmp_path: Path, source: str) -> None:
    assert lint_script(_script(tmp_path, source)) == []


def test_a_coding_line_is_honoured_and_bad_bytes_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    latin = tmp_path / "latin.py"
    latin.write_bytes(
        b"# -*- coding: latin-1 -*-\nfrom vllm import LLM\nname = '\xe9'\nLLM(name)\n"
    )
    assert [f.line for f in lint_script(latin)] == [4]
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"x = '\xff\xfe'\n")  # not UTF-8 and no coding line
    assert main(["lint-script", str(broken)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_a_long_call_chain_is_linted_in_linear_time(tmp_path: Path) -> None:
    """2,000 functions each calling the next, the last starting an engine: one pass, not N."""
    import time

    count = 2000
    lines = ["from vllm import LLM", f"def f{count}():\n    return LLM('m')"]
    lines += [f"def f{i}():\n    return f{i + 1}()" for i in range(count - 1, -1, -1)]
    script = tmp_path / "chain.py"
    script.write_text("\n".join([*lines, "f0()\n"]))
    # this process's CPU time, not the clock: other test processes share the CPUs
    started = time.process_time()
    assert [f.line for f in lint_script(script)] == [len(script.read_text().splitlines())]
    assert time.process_time() - started < 2.0  # the quadratic version took 25 s


EDGES = """\
from vllm import LLM
DOC = \"\"\"
x = LLM('not code')
\"\"\"
@decorate
def f():
    return 1
try:
    pass
except Exception:
    engine = LLM('m')
value = (1 +
2)
LLM('top')
"""


@pytest.mark.parametrize("batch", [1, 2, 1000])
def test_reading_in_batches_splits_only_between_statements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """Strings, decorators, except branches and brackets that cross column 0 stay whole."""
    from toolchain.verify import spawn_lint

    monkeypatch.setattr(spawn_lint, "BATCH_LINES", batch)
    assert [f.line for f in lint_script(_script(tmp_path, EDGES))] == [11, 14]
    broken = _script(tmp_path, EDGES + "def (:\n")
    with pytest.raises(SyntaxError) as caught:
        lint_script(broken)
    assert caught.value.lineno == 15


def test_lint_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _script(tmp_path, "from vllm import LLM\nllm = LLM('m')\n")
    good = tmp_path / "good.py"
    good.write_text("from vllm import LLM\nif __name__ == '__main__':\n    LLM('m')\n")
    assert main(["lint-script", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:2: LLM(...) runs when the script is imported" in out
    assert 'if __name__ == "__main__":' in out
    assert main(["lint-script", str(good)]) == 0
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    assert main(["lint-script", str(broken)]) == 2


def test_shadowing_folder_module_and_pythonpath(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "vllm").mkdir(parents=True)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "vllm.py").write_text("")
    problems = [str(shadow) for shadow in check_shadowing(project, pythonpath=str(extra))]
    assert any("namespace package" in p for p in problems)
    assert any("vllm.py is a module named vllm" in p for p in problems)
    assert check_shadowing(tmp_path / "extra" / "..", pythonpath="") == []


def test_an_extension_module_shadows_and_a_bad_folder_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    (tmp_path / "vllm.so").write_bytes(b"\x7fELF")  # Python imports a plain vllm.so too
    assert [s.kind for s in check_shadowing(tmp_path, pythonpath="")] == ["an extension module"]
    assert main(["check-shadowing", str(tmp_path)]) == 1
    file = tmp_path / "a-file"
    file.write_text("")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for bad in (tmp_path / "missing", file, loop):
        assert main(["check-shadowing", str(bad)]) == 2
        assert "error:" in capsys.readouterr().err


def test_a_namespace_folder_only_warns_as_in_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    (tmp_path / "vllm").mkdir()
    assert main(["check-shadowing", str(tmp_path)]) == 0
    assert "warning: " in capsys.readouterr().out


def test_check_shadowing_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert main(["check-shadowing", str(tmp_path)]) == 0
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    assert main(["check-shadowing", str(tmp_path)]) == 1
    assert "cannot import name 'LLM' from 'vllm' (unknown location)" in capsys.readouterr().out
