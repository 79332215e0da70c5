"""verify's checks, one module each; `toolchain.verify.registry` finds them by their CHECK."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolchain.verify.context import Context
    from toolchain.verify.results import CheckResult


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str  # in --only, the report and report.json
    order: int  # place in the run and the report (gaps of 10 leave room)
    run: Callable[[Context], CheckResult]
    needs: tuple[str, ...] = ()  # checks whose results `run` reads
    engine: bool = False  # starts vLLM: the memory figures and the model are ready before it
    emulated: str = ""  # why it is not run in an emulated root; '' when it runs there too
    skip: Callable[[Context], str] | None = None  # why it is not run this time; '' to run
