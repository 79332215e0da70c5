"""The README's quickstart runs as written (the hour-long build replaced by `plan`), its install
line agrees with CI's, the seed-VM example is what `plan` prints, and every link in the docs
resolves."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.cli import build_parser
from toolchain.detect.host import Host
from toolchain.plan.render import render_plan

from .plan.test_plan import host_of, plan  # noqa: F401  (host_of is a fixture)
from .test_cli_output import _sessions

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# .ci/run installs these for tests only: cross compiler, QEMU, redis, sccache-dist's sandbox, the
# CI samples' tools. A package it adds that the build needs must go into the README's line.
CI_ONLY = {
    "gcc-aarch64-linux-gnu", "g++-12-aarch64-linux-gnu", "libc6-dev-arm64-cross",
    "qemu-user-static", "redis-server", "bubblewrap", "jq", "rsync", "nodejs", "npm",
}  # fmt: skip
# what a newcomer needs that CI's machines already have: git and its CA certificates to clone,
# ccache for fast rebuilds (optional)
NEWCOMER_ONLY = {"git", "ca-certificates", "ccache"}


def quickstart(readme: str = "") -> list[str]:
    """The commands of the README's quickstart block, one per line."""
    text = readme or README.read_text()
    section = text[text.index("## Quickstart") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the quickstart has a ```bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _apt_packages(line: str) -> set[str]:
    return {word for word in shlex.split(line)[2:] if not word.startswith("-")}


def _ci_packages() -> set[str]:
    text = (ROOT / ".ci" / "run").read_text()
    found = re.search(r"^packages=\((.*?)\)", text, re.S | re.M)
    assert found, ".ci/run lists its packages as packages=(...)"
    added = re.findall(r"packages\+=\((.*?)\)", text)
    return set(found.group(1).split()) | {p for extra in added for p in extra.split()}


def test_the_quickstart_is_the_commands_of_a_bare_debian() -> None:
    lines = quickstart()
    assert lines[:2] == ["apt-get update", lines[1]] and lines[1].startswith("apt-get install -y ")
    assert lines[2] == 'git clone "$REPO_URL" vllm-cpu-builder'
    assert lines[3] == "cd vllm-cpu-builder"
    assert lines[4:] == ["nox -s build-wheel -- --vllm 0.32.0", "nox -s tests"]


def test_its_install_line_has_what_ci_installs_for_the_toolkit() -> None:
    readme = _apt_packages(quickstart()[1])
    assert _ci_packages() - CI_ONLY == readme - NEWCOMER_ONLY
    text = (ROOT / "CONTRIBUTING.md").read_text()
    contributing = re.search(r"^sudo (apt-get install .*?)\s+#", text, re.M)
    assert contributing and _apt_packages(contributing.group(1)) == readme


def test_fresh_debian13_finds_the_install_line_and_the_test_command() -> None:
    """scripts/fresh-debian13.sh greps the README: the first `apt-get install` line, and
    `nox -s tests` within the 12 lines after it."""
    lines = README.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("apt-get install "))
    assert lines[first] == quickstart()[1]
    assert "nox -s tests" in lines[first : first + 13]
    assert "grep -m1 '^apt-get install '" in (ROOT / "scripts" / "fresh-debian13.sh").read_text()


def test_its_nox_commands_name_sessions_and_flags_that_exist() -> None:
    sessions, parser = _sessions(), build_parser()
    for line in quickstart()[4:]:
        words = shlex.split(line)
        assert words[:2] == ["nox", "-s"] and words[2] in sessions, line
        if "--" in words:  # the session passes what follows `--` to the command of its name
            parser.parse_args([words[2], *words[words.index("--") + 1 :]])
    assert "nox -s tests" in (ROOT / ".ci" / "run").read_text()  # "exactly as CI does"


@pytest.mark.integration
def test_the_build_command_plans_for_real_here(tmp_path: Path) -> None:
    """The build line as written, with `plan --json` for `build-wheel`: it must plan on this
    machine (nothing is compiled or downloaded)."""
    words = shlex.split(quickstart()[4])
    args = ["plan", *words[words.index("--") + 1 :], "--json", "--wheel-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "toolchain", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout[done.stdout.index("{") :])
    assert result["vllm_version"] == "0.32.0" and "+cpu." in result["wheel_version"]
    assert result["max_jobs"] >= 1


def test_the_seed_vm_example_is_what_plan_prints(host_of: Callable[..., Host]) -> None:  # noqa: F811
    seed = host_of("x86-haswell", cpus=6, total_gib=7.75, available_gib=4.66)
    printed = render_plan(plan(seed, "0.32.0")).splitlines()
    wanted = [line for line in printed if line.startswith(("MAX_JOBS ", "scheduling: "))]
    page = (ROOT / "docs" / "plan.md").read_text()
    block = re.search(r"on the seed VM, `plan --vllm 0.32.0`\n.*?```\n(.*?)```", page, re.S)
    assert block and block.group(1).splitlines() == wanted
    flat = plan(seed, "0.16.0").max_jobs
    assert f"without a measured model (0.16.0) gets {flat} job" in " ".join(page.split())


# the link checker
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(markdown: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens, -1 for repeats."""
    found, times = set(), dict[str, int]()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", FENCE.sub("", markdown), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{times[slug]}" if slug in times else slug)
        times[slug] = times.get(slug, 0) + 1
    return found


def broken_links(page: Path) -> list[str]:
    """Relative links of `page` whose file or `#anchor` does not exist."""
    wrong = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: are not ours to check
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            wrong.append(f"{page.name}: {target} (no such file)")
        elif anchor and anchor not in anchors(linked.read_text()):
            wrong.append(f"{page.name}: {target} (no such heading)")
    return wrong


def test_every_relative_link_and_anchor_in_the_docs_resolves() -> None:
    pages = [README, ROOT / "CONTRIBUTING.md", ROOT / "recipes" / "README.md"]
    pages += sorted((ROOT / "docs").rglob("*.md"))
    assert len(pages) > 10
    assert [w for page in pages for w in broken_links(page)] == []


def test_the_link_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# `plan`: decide (now)\n\n## Same\n\n## Same\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](other.md#plan-decide-now) [b](other.md#same-1) [c](#here) [d](https://x.y/#z)\n"
        "## Here\n[e](missing.md) [f](other.md#nowhere) [g](#same)\n"
        "```\n[h](inside-a-fence.md)\n```\n"
    )
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nowhere (no such heading)",
        "page.md: #same (no such heading)",
    ]
