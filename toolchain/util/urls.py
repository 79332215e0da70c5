"""URLs as users give them: checked for a scheme up front, and never shown with a password."""

from __future__ import annotations

import re
import urllib.parse

from toolchain.errors import UsageError

# scheme://user:password@host -> scheme://user:***@host, wherever it stands in a text
CREDENTIALS = re.compile(r"(\b[a-zA-Z][\w+.-]*://[^/\s:@]*:)[^@/\s]+@")
SCHEMES = ("http", "https", "file")


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return CREDENTIALS.sub(r"\1***@", text)


def checked_url(value: str, flag: str) -> str:
    """`value` if it is an http(s) or file URL; a usage error naming the flag otherwise."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in SCHEMES or (parts.scheme != "file" and not parts.netloc):
        raise UsageError(
            f"{flag} takes a URL such as https://host/simple/, not '{redact(value)}'",
            hint=f"for a folder, use file:///path or --find-links; schemes: {', '.join(SCHEMES)}",
        )
    return value
