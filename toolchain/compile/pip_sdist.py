"""Download one sdist through pip's own network layer, with pip's own configuration.

`pip download` itself cannot be used for vLLM: it prepares the sdist's metadata, which installs
vLLM's build requirements (torch==X+cpu) in an isolated environment first (pypa/pip#1884). This
asks pip's finder for the file and pip's session for its bytes instead, so everything pip would
apply applies: the index and extra indexes from pip.conf or PIP_* variables, keyring and .netrc
credentials, proxies, a custom CA (`cert`), client certificates and trusted hosts.

    [PIP_INDEX_URL=URL] python -m toolchain.compile.pip_sdist PROJECT FILENAME DEST

takes the index from PIP_INDEX_URL as pip does (never from the command line, where every user of
the machine could read its credentials in /proc/PID/cmdline), and prints
`{"url": ..., "index_sha256": ...}` on success. Exit status 3: the index has no such file;
4: the download failed; 5: this pip's internals are not the ones this module knows.
pip's internals are not a public API: only this module touches them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

NOT_FOUND, DOWNLOAD_FAILED, PIP_CHANGED = 3, 4, 5
CHUNK = 1 << 20


def _fail(code: int, message: str) -> int:
    sys.stderr.write(message.rstrip() + "\n")
    return code


def _download(project: str, filename: str, dest: str) -> int:
    from pip._internal.commands import create_command

    from toolchain.util.urls import redact

    command: Any = create_command("download")
    flags = ["--no-deps", "--no-binary", ":all:", "--quiet", "-d", "."]
    with command.main_context():
        options, _ = command.parse_args([*flags, project])
        session = command.get_default_session(options)
        finder = command._build_package_finder(
            options=options, session=session, target_python=None, ignore_requires_python=True
        )
        links = [c.link for c in finder.find_all_candidates(project) if c.link.filename == filename]
        if not links:
            where = ", ".join(redact(url) for url in finder.index_urls) or "pip's index"
            return _fail(NOT_FOUND, f"{filename} is not on {where} (as pip sees it)")
        link = links[0]
        try:
            with session.get(link.url, stream=True) as response, open(dest, "wb") as out:
                response.raise_for_status()
                for chunk in response.iter_content(CHUNK):
                    out.write(chunk)
        except Exception as exc:  # requests' errors, as pip's session raises them
            return _fail(DOWNLOAD_FAILED, f"download of {redact(link.url)} failed: {exc}")
        stated = link.hash if link.hash_name == "sha256" else None
        print(json.dumps({"url": redact(link.url), "index_sha256": stated}))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        return _fail(64, __doc__ or "")
    project, filename, dest = argv
    try:
        return _download(project, filename, dest)
    except (ImportError, AttributeError, TypeError) as exc:
        return _fail(PIP_CHANGED, f"this pip's internals differ from what is known: {exc!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
