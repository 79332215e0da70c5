"""The human-readable plan."""

from __future__ import annotations

from toolchain.plan.buildplan import BuildPlan
from toolchain.util.units import gib


def render_plan(plan: BuildPlan) -> str:
    jobs = plan.jobs
    lines = [
        f"vLLM {plan.vllm_version} for {plan.arch}, target {plan.target_isa} "
        f"({plan.isa_model}); wheel version {plan.wheel_version}",
        f"runs on CPUs with {' '.join(plan.min_isa)}",
        f"Python {plan.python.version} ({plan.python.interpreter}), "
        f"{plan.torch.requirement} from {plan.torch.index_url}",
        f"compiler {plan.compiler.cxx} {plan.compiler.version} ({plan.compiler.origin})",
        *(
            [
                f"compile cache {plan.shared_cache.where} ({plan.shared_cache.backend}, through "
                f"{plan.shared_cache.requirement}; credentials from the environment)"
            ]
            if plan.shared_cache
            else []
        ),
        f"MAX_JOBS {plan.max_jobs}: limited by {jobs.limited_by}; {jobs.cpus} CPUs, "
        f"{gib(jobs.available_bytes)} available, {gib(jobs.memory_per_job_bytes)} per job, "
        f"{gib(jobs.reserve_bytes)} reserve, expected peak {gib(jobs.expected_peak_bytes)}",
        "environment:",
        *(f"  {key}={value}" for key, value in sorted(plan.env.items())),
        "steps:",
        *(f"  {index}. {step.name}: {step.summary}" for index, step in enumerate(plan.steps, 1)),
    ]
    lines += [f"patch {p.file.name}: {p.reason}" for p in plan.patches]
    lines += [
        f"left out of the wheel's requirements: {d.name}: {d.reason}"
        for d in plan.dropped_requirements
    ]
    lines += [f"warning: {warning}" for warning in plan.warnings]
    return "\n".join(lines)
