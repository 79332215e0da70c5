"""What verify's checks read: the environment under test, its facts and the results so far."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.util import run
from toolchain.verify.checks.imports import console_state
from toolchain.verify.engine_checks import SCRIPTS, Engine
from toolchain.verify.memflag import (
    DEFAULT_UTILIZATION,
    NodeMemory,
    Reservation,
    node_memory,
    reservation,
)
from toolchain.verify.results import CheckResult

if TYPE_CHECKING:
    from toolchain.verify.flow import Verification


@dataclass(frozen=True, kw_only=True)
class Engines:
    """What the checks that start vLLM share: the memory figures, the engine, its starts."""

    memory: NodeMemory
    planned: Reservation  # what the user's --gpu-memory-utilization reserves
    default: Reservation  # what vLLM's default reserves
    engine: Engine
    attempts: list[dict[str, Any]] = field(default_factory=list)  # generate's starts, in order


@dataclass(kw_only=True)
class Context:
    state: Verification
    facts: dict[str, Any]  # what probe_env.py reported about the environment
    env: dict[str, str]
    clean: Path  # an empty folder to run from: nothing in it can shadow vllm
    manifest: dict[str, Any] | None  # the build manifest, from the wheel or its dist-info
    substitute_torch: str = ""
    results: dict[str, CheckResult] = field(default_factory=dict)  # the checks run so far
    prepared: Engines | None = None  # set before the first check that starts vLLM

    @cached_property
    def console(self) -> str:
        """'works', 'is missing', 'fails (...)' or 'not checked': the `vllm` command."""
        if not {"import", "serve"} & set(self.state.options.only):
            return "not checked"
        return console_state(self.state.python, self.env)

    @property
    def engines(self) -> Engines:
        if self.prepared is None:
            raise RuntimeError("a check that starts vLLM must say so: Check(engine=True)")
        return self.prepared

    def prepare_engines(self) -> Engines:
        """The engine runs with the user's setting when it leaves vLLM's margin, else advice."""
        state, options = self.state, self.state.options
        memory = node_memory()
        planned = reservation(memory, options.utilization)
        utilization = (
            planned.utilization if planned.leaves_margin else planned.recommended_utilization
        )
        engine_env = dict(self.env)
        if self.facts["platform"]["device_type"] != "cpu":
            engine_env["VLLM_TARGET_DEVICE"] = "cpu"  # so the rest can still be checked
        needs_model = {"generate", "serve"} & set(options.only)
        engine = Engine(
            python=state.python,
            model=options.model or (_tiny_model(state) if needs_model else Path()),
            utilization=utilization,
            env=engine_env,
            logs=state.logs,
            use_console_script=self.console == "works",
            timeout=state.engine_timeout,
            kv_cache_bytes=state.engine_kv_cache_bytes,
            eager=state.engine_eager,
        )
        self.prepared = Engines(
            memory=memory,
            planned=planned,
            default=reservation(memory, DEFAULT_UTILIZATION),
            engine=engine,
        )
        return self.prepared


def _tiny_model(state: Verification) -> Path:
    return tiny_model(state.python, state.logs / "tiny-model", state.logs / "install.log")


def tiny_model(python: Path, model: Path, log: Path) -> Path:
    """verify's tiny local model at `model`, made with `python` (torch, transformers) once."""
    if not (model / "config.json").is_file():
        shutil.rmtree(model, ignore_errors=True)
        run.run_logged(
            [python, SCRIPTS / "make_tiny_model.py", model], log=log, what="making the tiny model"
        )
    return model
