"""Index URLs with credentials go to pip and uv through their environment, never their argv.

A command line is readable by every user of the machine (/proc/PID/cmdline). pip reads
PIP_INDEX_URL / PIP_EXTRA_INDEX_URL as it reads --index-url / --extra-index-url, uv reads
UV_INDEX_URL / UV_EXTRA_INDEX_URL; a flag on the command line would win over the variable, so a
URL with credentials leaves the command line altogether. Commands shown to a person carry each
URL without its user part instead, and a note says where pip finds the credentials.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toolchain.util.urls import has_secret, split_credentials

# flag -> (pip's variable, uv's variable); several values of a variable are space-separated
INDEX_FLAGS = {
    "--index-url": ("PIP_INDEX_URL", "UV_INDEX_URL"),
    "--extra-index-url": ("PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL"),
}
CREDENTIALS_NOTE = (
    "the index credentials are not shown: pip and uv take them from ~/.netrc or keyring "
    "(or PIP_INDEX_URL / UV_INDEX_URL with the URL in full); --run passes them through "
    "the environment"
)


def _pairs(argv: Sequence[str]) -> list[tuple[int, str, str]]:
    """(position, flag, URL) of every index flag in `argv`."""
    return [
        (at, word, argv[at + 1])
        for at, word in enumerate(argv[:-1])
        if word in INDEX_FLAGS and (at == 0 or argv[at - 1] not in INDEX_FLAGS)
    ]


def secret_indexes_to_env(
    argv: Sequence[str], *, uv: bool = False
) -> tuple[list[str], dict[str, str]]:
    """(`argv` without the index flags whose URLs hold credentials, the variables that carry
    them instead). A flag whose variable is used leaves with all its values: pip would otherwise
    take the command line's and drop the variable's."""
    pairs = _pairs(argv)
    moved = {flag for _, flag, url in pairs if has_secret(url)}
    env: dict[str, str] = {}
    for _, flag, url in pairs:
        if flag in moved:
            name = INDEX_FLAGS[flag][1 if uv else 0]
            env[name] = f"{env[name]} {url}" if name in env else url
    dropped = {at for at, flag, _ in pairs if flag in moved} | {
        at + 1 for at, flag, _ in pairs if flag in moved
    }
    return [word for at, word in enumerate(argv) if at not in dropped], env


def shown_command(argv: Sequence[str]) -> tuple[list[str], bool]:
    """(`argv` with each index URL's user part left out, whether any URL held a credential; a
    secret query value is left to `redact`)."""
    shown, stripped = list(argv), False
    for at, _, url in _pairs(argv):
        shown[at + 1], stripped = split_credentials(url)[0], stripped or has_secret(url)
    return shown, stripped


def with_env(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str] | None:
    """The child's environment: `base` plus `extra`, or None (inherit) when nothing is added."""
    return {**base, **extra} if extra else None
