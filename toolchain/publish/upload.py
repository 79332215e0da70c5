"""Upload wheels to a real index server with twine; refuse clashes; leave nothing half-done.

Credentials come from twine's own sources (TWINE_USERNAME / TWINE_PASSWORD or keyring) and are
never put on a command line, printed or logged. Before anything is sent, every wheel is looked up
on the server: the same file is skipped, a different file under the same name is a clash and
nothing is uploaded. If an upload fails part-way, the files this run sent are removed again.
"""

from __future__ import annotations

import base64
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename

from toolchain.errors import ProcessFailedError, PublishError
from toolchain.util import run
from toolchain.util.files import sha256_file
from toolchain.util.report import reporter
from toolchain.util.simple_api import project_files


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect elsewhere means: not on this server


NO_REDIRECTS = urllib.request.build_opener(_NoRedirect)
AUTH_WORDS = ("401", "403", "Invalid or non-existent authentication", "Forbidden", "Unauthorized")


@dataclass
class UploadReport:
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def simple_url(upload_url: str) -> str:
    """Where a server that takes uploads at `upload_url` lists its files (pypiserver, devpi)."""
    base = upload_url.rstrip("/")
    return f"{base}/+simple" if "/+" not in base and _is_devpi(base) else f"{base}/simple"


def _is_devpi(base: str) -> bool:
    return urllib.parse.urlsplit(base).path.count("/") >= 2  # devpi: /USER/INDEX


def existing_files(upload_url: str, project: str) -> dict[str, str]:
    """filename -> sha256 of what the server already has for `project`."""
    url = f"{simple_url(upload_url)}/{canonicalize_name(project)}/"
    try:
        files = project_files(url, timeout=30, opener=NO_REDIRECTS)
    except urllib.error.HTTPError as exc:
        if exc.code == 404 or 300 <= exc.code < 400:  # pypiserver redirects unknown names to PyPI
            return {}
        raise PublishError(f"{url} answered {exc.code}") from exc
    except OSError as exc:
        raise PublishError(
            f"cannot reach {url}: {exc}", hint="is the index server running?"
        ) from exc
    return {file.filename: file.sha256 or "" for file in files}


def plan_upload(wheels: Sequence[Path], upload_url: str) -> tuple[list[Path], list[str]]:
    """(wheels to send, names already there identically); a clash raises before any upload."""
    send, same = [], []
    by_project: dict[str, dict[str, str]] = {}
    for wheel in wheels:
        project = str(parse_wheel_filename(wheel.name)[0])
        there = by_project.setdefault(project, existing_files(upload_url, project))
        if wheel.name not in there:
            send.append(wheel)
        elif there[wheel.name] == sha256_file(wheel):
            same.append(wheel.name)
        else:
            raise PublishError(
                f"{upload_url} already has {wheel.name} with different content (sha256 "
                f"{there[wheel.name][:12] or 'unknown'}..., ours {sha256_file(wheel)[:12]}...): "
                "nothing was uploaded",
                hint="a published file never changes: bump the version or +cpu label, rebuild",
            )
    return send, same


def upload(wheels: Sequence[Path], upload_url: str, log: Path) -> UploadReport:
    send, same = plan_upload(wheels, upload_url)
    report = UploadReport(skipped=same)
    for wheel in send:
        try:
            run.run_logged(
                [
                    sys.executable,
                    "-m",
                    "twine",
                    "upload",
                    "--non-interactive",
                    "--disable-progress-bar",
                    "--repository-url",
                    upload_url,
                    wheel,
                ],
                log=log,
                what=f"uploading {wheel.name}",
            )
        except ProcessFailedError as exc:
            _roll_back(report.uploaded, upload_url)
            raise _upload_error(exc, wheel, upload_url, report.uploaded) from exc
        report.uploaded.append(wheel.name)
    return report


def _upload_error(
    exc: ProcessFailedError, wheel: Path, upload_url: str, removed: Sequence[str]
) -> PublishError:
    undone = f"; removed again what this run sent: {', '.join(removed)}" if removed else ""
    if any(word in exc.message for word in AUTH_WORDS):
        return PublishError(
            f"{upload_url} refused the credentials for {wheel.name}{undone}",
            hint="set TWINE_USERNAME and TWINE_PASSWORD (or store them in keyring) for this server",
        )
    return PublishError(f"uploading {wheel.name} to {upload_url} failed{undone}", hint=exc.hint)


def _roll_back(names: Sequence[str], upload_url: str) -> None:
    """Remove files this run uploaded (pypiserver's remove_pkg action)."""
    for name in names:
        project, version, _, _ = parse_wheel_filename(name)
        body = urllib.parse.urlencode(
            {":action": "remove_pkg", "name": str(project), "version": str(version)}
        ).encode()
        request = urllib.request.Request(upload_url, data=body, headers=_auth_header(os.environ))
        try:
            urllib.request.urlopen(request, timeout=30).close()
        except OSError as exc:
            reporter.detail(f"could not remove {name} from {upload_url} ({exc}): remove it by hand")


def _auth_header(environ: Mapping[str, str]) -> dict[str, str]:
    user, password = environ.get("TWINE_USERNAME"), environ.get("TWINE_PASSWORD")
    if not user or password is None:
        return {}
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
