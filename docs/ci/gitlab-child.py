"""A GitLab child pipeline from `nox -s matrix -- --json`: one build job per cell, each tagged
with its target's runner label, then one publish job that needs them all.

    python3 docs/ci/gitlab-child.py cells.json > build.yml

CI/CD variables: VCB_CACHE and SCCACHE_REDIS_PASSWORD (build); VCB_UPLOAD with TWINE_USERNAME and
TWINE_PASSWORD to upload to an index server besides writing the static index (publish). Every
value is written as a JSON string, which YAML reads as it is: a cell's quotes and "$VCB_CACHE"
reach the job's shell unchanged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SOURCES = "/srv/vllm-sources"  # the air-gapped mirror on each build runner
MODEL = "/srv/models/opt-125m"  # the small model verify runs
INDEX_DIR = "/srv/www/vllm-index"  # the static index publish writes, unless VCB_INDEX_DIR is set
BUILD_PACKAGES = "g++ libnuma-dev patch ccache python3-venv nox"
PUBLISH_PACKAGES = "python3-venv nox"
FLAGS = "--wheel-variants"  # publish also writes the index uv 0.13 picks variants from


def _install(packages: str) -> str:
    """Install what a runner lacks; the shell runner's user needs sudo for apt-get."""
    return (
        f"dpkg -s {packages} >/dev/null 2>&1 || "
        f"{{ sudo apt-get update -qq && sudo apt-get install -y -qq {packages}; }}"
    )


def _q(value: str) -> str:
    return json.dumps(value)


def build_job(cell: dict[str, Any]) -> list[str]:
    return [
        f"{_q(cell['name'])}:",
        "  stage: build",
        f"  tags: [linux, x64, {_q(cell['target'])}]",
        f"  variables: {{VCB_SOURCES: {_q(SOURCES)}}}",
        f"  before_script: [{_q(_install(BUILD_PACKAGES))}]",
        "  script:",
        f"    - {_q(cell['command'])}",
        f"    - {_q(f'nox -s verify -- wheels/*.whl --model {MODEL}')}",
        "  artifacts: {paths: [wheels/*.whl]}",
    ]


def publish_job(cells: list[dict[str, Any]]) -> list[str]:
    index_dir = f'"${{VCB_INDEX_DIR:-{INDEX_DIR}}}"'
    needs = ", ".join(_q(cell["name"]) for cell in cells)
    return [
        "publish:",
        "  stage: publish",
        "  tags: [linux, x64, index-host]",
        f"  needs: [{needs}]",
        f"  before_script: [{_q(_install(PUBLISH_PACKAGES))}]",
        "  script:",
        # the wheels of every cell, from the artifacts of the jobs it needs
        f"    - {_q(f'nox -s publish -- --wheel-dir wheels --index-dir {index_dir} {FLAGS}')}",
    ]


def child_pipeline(cells: list[dict[str, Any]]) -> str:
    lines = ["stages: [build, publish]", ""]
    for cell in cells:
        lines += [*build_job(cell), ""]
    return "\n".join([*lines, *publish_job(cells)]) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: gitlab-child.py CELLS_JSON > build.yml", file=sys.stderr)
        return 2
    cells = json.loads(Path(argv[0]).read_text())["include"]
    if not cells:
        print(f"{argv[0]}: the matrix has no cells", file=sys.stderr)
        return 1
    sys.stdout.write(child_pipeline(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
