"""Sources: the vLLM sdist from a package index, third-party archives from a local mirror.

Everything is checked against the recipe's sha256 before it is unpacked, and written under a
temporary name in its final folder, then renamed, so no half-written file is ever picked up.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from toolchain.compile.pip_sdist import PIP_CHANGED
from toolchain.errors import ProcessFailedError, SourceError, UsageError
from toolchain.plan.recipes import Recipe, ThirdParty, known_versions, load_recipe
from toolchain.settings import PYPI_SIMPLE
from toolchain.util import run
from toolchain.util.datafile import parse_json
from toolchain.util.files import CHUNK, atomic_path, remove_stale_parts, sha256_file, tar_sha256
from toolchain.util.net import open_url
from toolchain.util.report import reporter
from toolchain.util.simple_api import project_files
from toolchain.util.source_lock import LOCK_NAME, check_archive, read_lock
from toolchain.util.urls import redact


def index_file_url(index_url: str, project: str, filename: str) -> tuple[str, str | None]:
    """(download URL, sha256 the index states) of one file, from a PEP 691 or PEP 503 page."""
    page = f"{index_url.rstrip('/')}/{project}/"
    try:
        files = project_files(page)
    except OSError as exc:
        raise SourceError(
            f"cannot read the package index page {page}: {exc}",
            hint="check --index-url, or put the sdist in the --sources mirror",
        ) from exc
    for found in files:
        if found.filename == filename:
            return found.url, found.sha256
    raise SourceError(
        f"{filename} is not on the package index page {page}",
        hint="check the recipe's sdist name, or use --source-dir",
    )


def download(url: str, final: Path, sha256: str) -> Path:
    """Fetch `url` to `final` if its content has `sha256`; otherwise keep nothing."""
    reporter.detail(f"downloading {url}")
    with atomic_path(final) as temporary:
        digest = hashlib.sha256()
        try:
            with open_url(url, timeout=120) as response, temporary.open("wb") as out:
                _copy_hashing(response, out, digest)
        except OSError as exc:
            raise SourceError(f"download of {url} failed: {exc}") from exc
        if digest.hexdigest() != sha256:
            raise SourceError(
                f"{url} has sha256 {digest.hexdigest()}, the recipe expects {sha256}",
                hint="the file changed upstream or was tampered with; nothing was kept",
            )
    return final


def _copy_hashing(source: IO[bytes], out: IO[bytes], digest: Any) -> None:
    while chunk := source.read(CHUNK):
        digest.update(chunk)
        out.write(chunk)


@contextmanager
def file_errors_as_source_errors(where: Path) -> Iterator[None]:
    """A full disk, a read-only or forbidden folder: one clear error, nothing half-written."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, urllib.error.URLError):
            raise
        raise SourceError(
            f"could not write into {where} ({exc.strerror or exc}); nothing was kept",
            hint="free disk space, or choose a folder you can write (--work-dir, --to)",
        ) from exc


def fetch_sdist(
    *, sdist: str, sha256: str, cache: Path, index_url: str, mirror: Path | None
) -> Path:
    """The sdist from the cache, the mirror or the index, always checked against `sha256`."""
    with file_errors_as_source_errors(cache.parent):
        remove_stale_parts(cache)  # what a killed run left while writing it
        if cache.is_file() and sha256_file(cache) == sha256:
            reporter.detail(f"{sdist}: cached at {cache}")
            return cache
        if mirror is not None and (mirror / sdist).is_file():
            found = sha256_file(mirror / sdist)
            if found != sha256:
                raise SourceError(
                    f"{mirror / sdist} has sha256 {found}, the recipe expects {sha256}",
                    hint="replace it with the file from PyPI",
                )
            with atomic_path(cache) as temporary:
                shutil.copyfile(mirror / sdist, temporary)
            return cache
        project = sdist.split("-")[0]
        with atomic_path(cache) as temporary:
            fetched = _pip_download(project, sdist, temporary, index_url)
            if fetched is not None:
                _check_download(fetched, temporary, sdist, sha256)
                return cache
        url, stated = index_file_url(index_url, project, sdist)
        _check_stated(sdist, stated, sha256)
        return download(url, cache, sha256)


def _check_download(fetched: tuple[str, str | None], file: Path, sdist: str, sha256: str) -> None:
    url, stated = fetched
    _check_stated(sdist, stated, sha256)
    found = sha256_file(file)
    if found != sha256:
        raise SourceError(
            f"{url} has sha256 {found}, the recipe expects {sha256}",
            hint="the file changed upstream or was tampered with; nothing was kept",
        )
    reporter.detail(f"downloaded {url} through pip")


def _check_stated(sdist: str, stated: str | None, sha256: str) -> None:
    if stated is not None and stated != sha256:
        raise SourceError(
            f"the index states sha256 {stated} for {sdist}; the recipe expects {sha256}",
            hint="use the recipe's index, or fix the recipe",
        )


def _pip_download(
    project: str, filename: str, dest: Path, index_url: str
) -> tuple[str, str | None] | None:
    """(URL, sha256 the index states) of `filename` fetched into `dest` by pip's own network layer
    and configuration; None when this Python's pip cannot (then urllib fetches it)."""
    argv: list[str | Path] = [sys.executable, "-m", "toolchain.compile.pip_sdist", project]
    argv += [filename, dest]
    # the index through the environment: a command line is readable by every user (/proc)
    env = {**os.environ, **({"PIP_INDEX_URL": index_url} if index_url != PYPI_SIMPLE else {})}
    reporter.detail(f"fetching {filename} through pip (pip's index, credentials, proxy, CA)")
    result = run.capture(argv, timeout=3600, check=False, env=env)
    if result.returncode == PIP_CHANGED:
        dest.unlink(missing_ok=True)
        why = redact(result.stderr.strip().splitlines()[-1])
        reporter.warning(
            f"pip cannot fetch it here ({why}); fetching from {redact(index_url)} without pip's "
            "configuration"
        )
        return None
    if result.returncode != 0:
        raise SourceError(
            redact(result.stderr.strip().splitlines()[-1])
            if result.stderr.strip()
            else f"pip could not fetch {filename} (exit {result.returncode})",
            hint="check pip's configuration (pip config list) or --index-url, or put the "
            "sdist in the --sources mirror",
        )
    answer = parse_json(
        result.stdout.strip().rpartition("\n")[2], where="pip's answer", error=SourceError
    )
    return str(answer["url"]), answer["index_sha256"]


def github_archive_url(repository: str, ref: str) -> str:
    return f"{repository.removesuffix('.git')}/archive/{ref}.tar.gz"


def _git_archive(repo: Path, ref: str, prefix: str, target: Path, log: Path) -> None:
    """`ref` of the clone `repo` as a .tar.gz written to `target`; SourceError when the clone
    does not have it (a missing tag is one source that cannot be had, not a failed program)."""
    found = run.capture(
        ["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        timeout=120,
        check=False,
    )
    if found.returncode != 0:
        raise SourceError(
            f"the clone {repo} has no {ref}" + ("" if repo.is_dir() else " (not a folder)"),
            hint=f"git -C {repo} fetch --tags, or pass --git with a clone that has {ref}",
        )
    plain_tar = target.with_name(f"{target.name}.tar")
    try:
        run.run_logged(
            ["git", "-C", repo, "archive", "--format=tar", f"--prefix={prefix}/",
             f"--output={plain_tar}", ref],
            log=log,
            what=f"git archive {ref}",
        )  # fmt: skip
        with plain_tar.open("rb") as source, gzip.open(target, "wb", compresslevel=6) as packed:
            shutil.copyfileobj(source, packed, CHUNK)
    except ProcessFailedError as exc:
        raise SourceError(exc.message, hint=exc.hint) from exc
    finally:
        plain_tar.unlink(missing_ok=True)


def _fetch_dependency(
    dep: ThirdParty, target: Path, git_repos: Mapping[str, Path], log: Path
) -> None:
    """Write `dep`'s archive to `target` (a temporary name): from its --git clone, or GitHub."""
    if dep.name in git_repos:
        prefix = f"{dep.name}-{dep.ref.removeprefix('v')}"
        _git_archive(git_repos[dep.name], dep.ref, prefix, target, log)
        return
    url = github_archive_url(dep.repository, dep.ref)
    reporter.detail(f"downloading {url}")
    try:
        with urllib.request.urlopen(url, timeout=120) as response, target.open("wb") as out:
            shutil.copyfileobj(response, out, CHUNK)
    except (OSError, ValueError) as exc:  # ValueError: a repository that is not a URL
        raise SourceError(
            f"download of {redact(url)} failed: {exc}",
            hint=f"on a machine without GitHub, pass --git {dep.name}=<a clone of "
            f"{dep.repository}>",
        ) from exc


def check_git_repos(recipe: Recipe, git_repos: Mapping[str, Path]) -> None:
    """Every --git NAME is one of the recipe's third-party sources: a misspelled one would
    otherwise be ignored and the source downloaded from GitHub after all."""
    names = sorted({dep.name for dep in recipe.third_party})
    unknown = [name for name in git_repos if name not in names]
    if unknown:
        raise UsageError(
            f"--git {unknown[0]}: {recipe.path.name} has no third-party source of that name "
            "(names are case-sensitive)",
            hint=f"its third-party sources are: {', '.join(names) or 'none'}; "
            "pass --git NAME=PATH with one of those names",
        )


def _in_mirror(dep: ThirdParty, final: Path) -> tuple[str, str] | None:
    """(tar sha256, how it was checked) of the archive already in the mirror; None when it is
    missing, unreadable or does not match (then it is fetched anew, and stays as it is until a
    good one replaces it)."""
    if not final.is_file():
        return None
    try:
        found = tar_sha256(final)
    except SourceError as exc:
        reporter.warning(f"{exc.message}: fetching it anew")
        return None
    recorded = dep.tar_sha256 or read_lock(final.parent).get(final.name, {}).get("tar_sha256")
    if recorded is None:
        return None
    if found != recorded:
        reporter.warning(f"{final} holds a tar with sha256 {found}, not {recorded}: fetching anew")
        return None
    how = "the recipe" if dep.tar_sha256 else f"the hash recorded on first use in {LOCK_NAME}"
    return found, f"already in the mirror, matches {how}"


def _mirror_dependency(
    dep: ThirdParty, folder: Path, git_repos: Mapping[str, Path], *, log: Path, recipe: str
) -> tuple[str, str]:
    """Put `dep`'s archive in `folder` unless a checked one is there; (tar sha256, how checked).

    The archive is written and checked under a temporary name beside the final one, and renamed
    only once it matches: a failed refresh never touches the file already in the mirror."""
    final = folder / dep.archive
    kept = _in_mirror(dep, final)
    if kept is not None:
        return kept
    with atomic_path(final) as temporary:
        _fetch_dependency(dep, temporary, git_repos, log)
        found = tar_sha256(temporary, named=final)
        checked = check_archive(
            name=dep.name,
            ref=dep.ref,
            archive=final,
            recipe_sha256=dep.tar_sha256,
            found=found,
            recipe=recipe,
            shown=f"the archive made for {final.name}",
        )
    return found, checked


def fill_mirror(
    recipe: Recipe,
    folder: Path,
    *,
    index_url: str,
    arches: Sequence[str],
    git_repos: Mapping[str, Path],
) -> None:
    """Put the sdist and the third-party archives `arches` need in `folder`, each checked against
    the recipe (or, where it records no hash, recorded on first use). A source that cannot be had
    does not stop the others: all that can be fetched is fetched, then the failures are reported.
    A file already in `folder` that checks out is kept as it is and not fetched again."""
    check_git_repos(recipe, git_repos)
    deps = {dep.archive: dep for arch in arches for dep in recipe.third_party_for(arch)}
    with file_errors_as_source_errors(folder):
        log = folder / "fetch-sources.log"
        for name in deps:
            remove_stale_parts(folder / name)
        fetch_sdist(
            sdist=recipe.sdist,
            sha256=recipe.sha256,
            cache=folder / recipe.sdist,
            index_url=index_url,
            mirror=None,
        )
        reporter.line(f"{recipe.sdist}: sha256 {recipe.sha256}")
        failed: list[str] = []
        for dep in deps.values():
            try:
                found, checked = _mirror_dependency(
                    dep, folder, git_repos, log=log, recipe=recipe.path.name
                )
            except SourceError as exc:
                failed.append(
                    f"{dep.archive} ({dep.name} {dep.ref}, {dep.arch or 'all'}): {exc.message}"
                )
                reporter.warning(f"{dep.archive}: {exc.message}; the mirror was not changed")
                continue
            reporter.line(f"{dep.archive}: tar sha256 {found}: {checked}")
            if dep.tar_sha256 is None:
                where = f"{recipe.path.name} [[third_party]] {dep.name} {dep.ref}"
                reporter.line(f'  to record it, add to {where}: tar_sha256 = "{found}"')
    if failed:
        raise SourceError(
            f"{len(failed)} of {len(deps)} third-party sources for {', '.join(arches)} could not "
            f"be put in {folder} (the others are there, checked; files already there were "
            "left as they were):\n  " + "\n  ".join(failed),
            hint="--arch limits the mirror to the architectures you build for; "
            "--git NAME=REPO makes an archive from a local clone",
        )


def fetch_new_sdist(*, sdist: str, cache_root: Path, index_url: str) -> tuple[Path, str]:
    """(path, sha256) of an sdist no recipe records yet (`new-recipe`): through pip's
    configuration as `fetch_sdist`, checked against the sha256 the index states, and kept where
    `build-wheel` looks for it (cache_root/SHA256/SDIST)."""
    for cached in sorted(cache_root.glob(f"*/{sdist}")):
        if sha256_file(cached) == cached.parent.name:
            reporter.detail(f"{sdist}: cached at {cached}")
            return cached, cached.parent.name
    with file_errors_as_source_errors(cache_root):
        staging = cache_root / "new" / sdist
        project = sdist.split("-")[0]
        with atomic_path(staging) as temporary:
            fetched = _pip_download(project, sdist, temporary, index_url)
            if fetched is None:
                url, stated = index_file_url(index_url, project, sdist)
                urllib.request.urlretrieve(url, temporary)
            else:
                url, stated = fetched
            found = sha256_file(temporary)
            if stated is None:
                reporter.warning(f"{redact(url)} states no sha256: recording the file's own")
            elif stated != found:
                raise SourceError(
                    f"{redact(url)} has sha256 {found}, the index states {stated}",
                    hint="the download was damaged or tampered with; nothing was kept",
                )
        final = cache_root / found / sdist
        final.parent.mkdir(parents=True, exist_ok=True)
        staging.replace(final)
    return final, found


def release_sdist(
    version: str, *, recipes_dir: Path, cache_root: Path, index_url: str, mirror: Path | None
) -> Path:
    """vLLM `version`'s sdist, as build-wheel gets it (checked against its recipe, from the cache
    cache_root/SHA256/, the mirror or pip's index); for a release no recipe knows, the mirror's
    copy unchecked, else the index's, checked against the sha256 the index states."""
    sdist = f"vllm-{version}.tar.gz"
    if version in known_versions(recipes_dir):
        recipe = load_recipe(recipes_dir, version)
        return fetch_sdist(
            sdist=recipe.sdist,
            sha256=recipe.sha256,
            cache=cache_root / recipe.sha256 / recipe.sdist,
            index_url=index_url,
            mirror=mirror,
        )
    if mirror is not None and (mirror / sdist).is_file():
        reporter.warning(f"{mirror / sdist}: no recipe records its sha256; used as it is")
        return mirror / sdist
    return fetch_new_sdist(sdist=sdist, cache_root=cache_root, index_url=index_url)[0]
