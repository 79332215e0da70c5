"""Upload wheels to a real index server with twine; refuse clashes; leave nothing half-done.

Credentials come from the URL's user part or twine's own sources (TWINE_USERNAME / TWINE_PASSWORD
or keyring) and are never put on a command line, printed or logged: twine gets the URL and the
credentials through its environment. Before anything is sent, every wheel is looked up
on the server: the same file is skipped, a different file under the same name is a clash and
nothing is uploaded. If an upload fails part-way, the files this run sent are removed again.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import urllib.error
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from toolchain.errors import ProcessFailedError, PublishError
from toolchain.publish.index_servers import AUTO, ServerKind, server_kind
from toolchain.util import run
from toolchain.util.files import sha256_file
from toolchain.util.net import open_url
from toolchain.util.simple_api import project_files
from toolchain.util.urls import redact, split_credentials

# Whole words only: a traceback's "line 1401" is not a refusal (seen on Python 3.13).
AUTH_REFUSAL = re.compile(
    r"\b40[13]\b|Invalid or non-existent authentication|Forbidden|Unauthorized"
)


@dataclass
class UploadReport:
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def index_server(upload_url: str, kind: str = AUTO) -> ServerKind:
    """The server's kind (--server-kind, or asked with twine's credentials when `auto`)."""
    return server_kind(kind, upload_url, _auth_header(twine_env(upload_url, os.environ)))


def existing_files(upload_url: str, project: str, server: ServerKind) -> dict[str, str]:
    """filename -> sha256 of what the server already has for `project`."""
    url = f"{server.simple_url(upload_url)}{canonicalize_name(project)}/"
    try:
        files = project_files(url, timeout=30, redirects=False)  # elsewhere: not on this server
    except urllib.error.HTTPError as exc:
        if exc.code == 404 or 300 <= exc.code < 400:  # pypiserver redirects unknown names to PyPI
            return {}
        raise PublishError(f"{redact(url)} answered {exc.code}") from exc
    except OSError as exc:
        raise PublishError(
            redact(f"cannot reach {url}: {exc}"), hint="is the index server running?"
        ) from exc
    return {file.filename: file.sha256 or "" for file in files}


@dataclass(frozen=True, kw_only=True)
class UploadPlan:
    send: list[Path]
    same: list[str]
    before: dict[str, dict[str, str]]  # project -> filename -> sha256, as the server had them


def plan_upload(wheels: Sequence[Path], upload_url: str, server: ServerKind) -> UploadPlan:
    """What to send, what is already there identically; a clash raises before any upload."""
    send, same = [], []
    before: dict[str, dict[str, str]] = {}
    for wheel in wheels:
        project = canonicalize_name(parse_wheel_filename(wheel.name)[0])
        there = before.setdefault(project, existing_files(upload_url, project, server))
        if wheel.name not in there:
            send.append(wheel)
        elif there[wheel.name] == sha256_file(wheel):
            same.append(wheel.name)
        else:
            raise PublishError(
                f"{redact(upload_url)} already has {wheel.name} with different content (sha256 "
                f"{there[wheel.name][:12] or 'unknown'}..., ours {sha256_file(wheel)[:12]}...): "
                "nothing was uploaded",
                hint="a published file never changes: bump the version or +cpu label, rebuild",
            )
    return UploadPlan(send=send, same=same, before=before)


def upload(
    wheels: Sequence[Path], upload_url: str, log: Path, server_kind: str = AUTO
) -> UploadReport:
    server = index_server(upload_url, server_kind)
    planned = plan_upload(wheels, upload_url, server)
    report = UploadReport(skipped=planned.same)
    for wheel in planned.send:
        try:
            run.run_logged(
                [
                    sys.executable,
                    "-m",
                    "twine",
                    "upload",
                    "--non-interactive",
                    "--disable-progress-bar",
                    wheel,
                ],
                log=log,
                env=twine_env(upload_url, os.environ),
                what=f"uploading {wheel.name}",
            )
        except ProcessFailedError as exc:
            rollback = roll_back(report.uploaded, planned.before, upload_url, server)
            raise _upload_error(exc, wheel, upload_url, rollback) from exc
        report.uploaded.append(wheel.name)
    return report


@dataclass
class Rollback:
    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # "NAME (why)": still on the server

    def describe(self) -> str:
        words = []
        if self.removed:
            words.append(f"removed again what this run sent: {', '.join(self.removed)}")
        if self.left:
            words.append(f"NOT removed, remove by hand: {'; '.join(self.left)}")
        return "; ".join(words)


def roll_back(
    sent: Sequence[str],
    before: Mapping[str, Mapping[str, str]],
    upload_url: str,
    server: ServerKind,
) -> Rollback:
    """Remove the files this run sent, and only those.

    pypiserver's remove_pkg removes every file of a name and version, so a version is removed
    only when the server held none of its files before this run; otherwise nothing of it is
    removed and the report says what to remove by hand. Other servers are not sent it.
    """
    result = Rollback()
    if not server.removes_versions:
        why = f"{server.what} is not sent pypiserver's remove_pkg: remove it in the server"
        result.left += [f"{name} ({why})" for name in sent]
        return result
    versions: dict[tuple[str, str], list[str]] = {}
    for name in sent:
        project_name, project_version, _, _ = parse_wheel_filename(name)
        key = (canonicalize_name(project_name), str(project_version))
        versions.setdefault(key, []).append(name)
    for (project, version), names in versions.items():
        others = [
            other
            for other in before.get(project, {})
            if str(parse_wheel_filename(other)[1]) == version
        ]
        if others:
            why = f"the server removes whole versions and would take {', '.join(others)} too"
            result.left += [f"{name} ({why})" for name in names]
            continue
        problem = _remove_version(project, version, upload_url)
        gone = problem or _still_there(names, project, upload_url, server)
        if gone:
            result.left += [f"{name} ({gone})" for name in names]
        else:
            result.removed += names
    return result


def _remove_version(project: str, version: str, upload_url: str) -> str:
    """'' once the server accepted pypiserver's remove_pkg; otherwise why not."""
    env = twine_env(upload_url, os.environ)
    headers = _auth_header(env)
    if not headers:
        return "no TWINE_USERNAME/TWINE_PASSWORD in the environment to remove it with"
    body = urllib.parse.urlencode(
        {":action": "remove_pkg", "name": project, "version": version}
    ).encode()
    try:
        open_url(env["TWINE_REPOSITORY_URL"], data=body, headers=headers, timeout=30).close()
    except OSError as exc:
        return redact(f"the server refused to remove it: {exc}")
    return ""


def _still_there(names: Sequence[str], project: str, upload_url: str, server: ServerKind) -> str:
    try:
        there = existing_files(upload_url, project, server)
    except PublishError as exc:
        return f"could not check that it is gone: {exc.message}"
    return "the server still lists it" if set(names) & set(there) else ""


def _twine_reason(message: str) -> str:
    """The line of twine's output that says why (HTTPError, invalid metadata), if any."""
    for line in message.splitlines():
        if "HTTPError" in line or line.strip().startswith(("ERROR", "InvalidDistribution")):
            return redact(line.strip())[:300]
    return ""


def _upload_error(
    exc: ProcessFailedError, wheel: Path, upload_url: str, rollback: Rollback
) -> PublishError:
    undone = f"; {rollback.describe()}" if rollback.removed or rollback.left else ""
    url = redact(upload_url)
    if AUTH_REFUSAL.search(exc.message):
        return PublishError(
            f"{url} refused the credentials for {wheel.name}{undone}",
            hint="set TWINE_USERNAME and TWINE_PASSWORD (or store them in keyring) for this server",
        )
    reason = _twine_reason(exc.message)
    return PublishError(
        f"uploading {wheel.name} to {url} failed{f' ({reason})' if reason else ''}{undone}",
        hint=redact(exc.hint),
    )


def twine_env(upload_url: str, environ: Mapping[str, str]) -> dict[str, str]:
    """twine's environment for `upload_url`: the URL without its user part, and the credentials
    (from the URL, else TWINE_USERNAME / TWINE_PASSWORD), never on its command line."""
    bare, credentials = split_credentials(upload_url)
    env = {**environ, "TWINE_REPOSITORY_URL": bare}
    if credentials is not None:
        env["TWINE_USERNAME"], env["TWINE_PASSWORD"] = credentials
    return env


def _auth_header(environ: Mapping[str, str]) -> dict[str, str]:
    user, password = environ.get("TWINE_USERNAME"), environ.get("TWINE_PASSWORD")
    if not user or password is None:
        return {}
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
