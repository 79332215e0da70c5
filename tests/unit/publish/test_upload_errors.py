"""How a failed twine run is told: a refusal of the credentials only when the server said so."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.errors import ProcessFailedError
from toolchain.publish.upload import Rollback, _upload_error

WHEEL = Path("vcbdemo-1.1+cpu.portable-py3-none-any.whl")
URL = "http://127.0.0.1:8080/"


@pytest.mark.parametrize(
    ("output", "refused"),
    [
        ("HTTPError: 403 Forbidden from http://127.0.0.1:8080/", True),
        ("ERROR    HTTPError: 401 Unauthorized", True),
        ("Invalid or non-existent authentication information.", True),
        # Python 3.13's zipfile: the line number holds "401", the wheel is what is wrong.
        (
            '  File "/usr/lib/python3.13/zipfile/__init__.py", line 1401, in __init__\n'
            "zipfile.BadZipFile: File is not a zip file",
            False,
        ),
        ("ERROR    InvalidDistribution: Invalid distribution metadata", False),
    ],
)
def test_only_a_real_refusal_is_called_one(output: str, refused: bool) -> None:
    error = _upload_error(ProcessFailedError(output), WHEEL, URL, Rollback())
    assert error.message.startswith(f"{URL} refused the credentials") is refused
    assert error.message.startswith(f"uploading {WHEEL.name} to {URL} failed") is not refused
