"""URLs as users give them: checked up front, and never shown with a credential.

`redact` is the one redactor: every message, printed command, log line and JSON field goes
through it. A URL's whole user part is hidden (`https://***@host/`): a token is often the user
name (`https://TOKEN@host`, `https://TOKEN:x-oauth-basic@host`), so no part of it is safe to show.
Query parameters that look like secrets (`?token=`, `?private_token=`, `?sig=`) keep their name,
not their value. `split_credentials` gives a URL without its user part and the credentials, for
Basic auth or a child's environment: never for a command line.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from toolchain.errors import UsageError

SCHEMES = ("http", "https", "file")
HIDDEN = "***"
# scheme://AUTHORITY REST: the authority ends at / ? # (RFC 3986), the rest at white space
URL = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^\s/?#\"<>]*)([^\s\"<>]*)")
# Names of query parameters and environment variables whose values are secrets.
SECRET_NAME = re.compile(
    r"token|secret|passw|pwd|^pass$|api_?key|access_?key|private_?key|^key$|^sig$|signature|"
    r"credential|auth|session",
    re.IGNORECASE,
)
QUERY_PARAMETER = re.compile(r"([?&;])([^=&;#\s]+)=([^&;#\s\"'<>]*)")


def _hidden_parameter(match: re.Match[str]) -> str:
    separator, name, value = match.groups()
    secret = value and SECRET_NAME.search(urllib.parse.unquote(name).replace("-", "_"))
    return f"{separator}{name}={HIDDEN}" if secret else match.group(0)


def _redact_url(match: re.Match[str]) -> str:
    scheme, authority, rest = match.groups()
    if "@" in authority:  # userinfo is everything before the last @, as urllib reads it
        authority = f"{HIDDEN}@{authority.rpartition('@')[2]}"
    elif ":" in authority.rpartition("]")[2] and "@" in rest:
        # a /, ? or # in the password (`u:pa/ss@host`) ends the authority early: hide up to @
        authority, rest = f"{HIDDEN}@", rest.rpartition("@")[2]
    return scheme + authority + QUERY_PARAMETER.sub(_hidden_parameter, rest)


# What to give instead: pip's index flags take a folder of wheels as file:// or --find-links
FOLDER_HINT = "for a folder, use file:///path or --find-links"
URL_HINTS = {
    "--upload": "give the upload URL of the index server, e.g. http://host:8080/",
    "--index": "for a folder, use file:///path/ (`install-command --index-dir DIR` for one "
    "written by publish)",
}


def redact(text: str) -> str:
    """`text` with the user part and the secret query values of every URL in it hidden."""
    return URL.sub(_redact_url, text)


def redact_json(value: Any) -> Any:
    """`value` (parsed JSON) with every string redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list | tuple):
        return [redact_json(item) for item in value]
    if isinstance(value, dict):
        return {key: redact_json(item) for key, item in value.items()}
    return value


def has_secret(text: str) -> bool:
    """Whether `text` holds a credential `redact` would hide."""
    return redact(text) != text


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Environment variables as they may be shown: secrets by name hidden, URLs redacted."""
    return {
        key: HIDDEN if SECRET_NAME.search(key) and value else redact(value)
        for key, value in env.items()
    }


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """(`url` without its user part, (user, password) percent-decoded, or None)."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return bare, (urllib.parse.unquote(user), urllib.parse.unquote(password))


def url_parts(value: str, flag: str) -> urllib.parse.SplitResult:
    """`value` split, its host and port checked; a usage error naming the flag otherwise."""
    shown = redact(value)
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError as exc:  # urllib's words may quote the password: not repeated
        raise UsageError(
            f"{flag} {shown}: not a URL (an unbalanced '[' or ']', or a host in [ ] that is not "
            "an IPv6 address)",
            hint="an IPv6 host is written in brackets: http://[::1]:8080/",
        ) from exc
    try:
        parts.port  # noqa: B018 -- urllib checks the port only when it is asked for
    except ValueError as exc:
        raise UsageError(
            f"{flag} {shown}: the port is not a number from 0 to 65535",
            hint="write the port as digits after the host (http://host:8080/); a password "
            "with / ? # or @ in it is percent-encoded (%2F %3F %23 %40)",
        ) from exc
    return parts


def checked_url(value: str, flag: str) -> str:
    """`value` if it is an http(s) or file URL with a good host and port; a usage error naming the
    flag otherwise."""
    parts = url_parts(value, flag)
    if parts.scheme not in SCHEMES or (parts.scheme != "file" and not parts.hostname):
        raise UsageError(
            f"{flag} takes a URL such as https://host/simple/, not '{redact(value)}'",
            hint=f"{URL_HINTS.get(flag, FOLDER_HINT)}; schemes: {', '.join(SCHEMES)}",
        )
    return value
