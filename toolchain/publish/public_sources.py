"""Where install-command's public requirements come from, and the command that installs them.

The toolkit's `--index-url` when given; else the index-url of pip's own configuration (a PyPI
mirror a locked-down network relies on); else PyPI. pip reads its configuration's extra indexes
and find-links by itself; uv reads none of it, so those go onto uv's command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toolchain.runtime_deps import PipSources, RuntimePlan
from toolchain.settings import PYPI_SIMPLE
from toolchain.util.pip_config import PipConfig


@dataclass(frozen=True, kw_only=True)
class PublicSources:
    index_url: str | None  # the toolkit's --index-url; None when not given
    sources: PipSources
    pip_config: PipConfig

    @property
    def index(self) -> str:
        return self.index_url or self.pip_config.index_url or PYPI_SIMPLE

    def commands(
        self, install: Sequence[str], deps: RuntimePlan, *, reads_pip_config: bool
    ) -> tuple[list[tuple[str, ...]], list[str]]:
        """The command installing `deps` with `install` (none when nothing is needed), and the
        notes that say where the packages come from."""
        if not deps.install:
            return [], []
        torch = next((r for r in deps.install if r.startswith("torch==")), None)
        notes = self._notes(torch, reads_pip_config=reads_pip_config)
        carried = [] if reads_pip_config else self._pip_config_args()
        argv = (*install, "--index-url", self.index, *carried)
        return [(*argv, *self.sources.args(torch=bool(torch)), *deps.install)], notes

    def _pip_config_args(self) -> list[str]:
        config = self.pip_config
        return [
            *(arg for url in config.extra_index_urls for arg in ("--extra-index-url", url)),
            *(arg for link in config.find_links for arg in ("--find-links", link)),
        ]

    def _notes(self, torch: str | None, *, reads_pip_config: bool) -> list[str]:
        config = self.pip_config
        notes = []
        if self.index_url is None and config.index_url:
            notes.append(f"public index from pip's configuration ({config.origin('index-url')})")
        if not reads_pip_config and self._pip_config_args():
            origins = sorted({config.origin(o) for o in ("extra-index-url", "find-links")} - {""})
            notes.append(f"uv reads no pip configuration: given here from {', '.join(origins)}")
        if torch and not self.sources.torch_index_reachable and not self.sources.find_links:
            unreachable = f"{self.sources.torch_index or 'no PyTorch index'} is unreachable"
            if self._pip_config_args():
                notes.append(
                    f"{torch} is not on PyPI and {unreachable}: it must come from pip's own "
                    "configuration (or give --find-links)"
                )
            else:
                notes.append(
                    f"{torch} is not on PyPI, {unreachable} and pip's configuration names no "
                    "other index or folder: give --find-links or --torch-index"
                )
        return notes
