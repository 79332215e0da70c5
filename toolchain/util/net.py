"""Whether a server answers: the one reachability check."""

from __future__ import annotations

import urllib.error
import urllib.request


def reachable(url: str, timeout: float = 10.0) -> bool:
    """Whether a server answers at `url` at all (an HTTP error is still an answer)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def github_reachable() -> bool:
    return reachable("https://github.com", timeout=5.0)
