"""The human-readable plan."""

from __future__ import annotations

from toolchain.plan.buildplan import BuildPlan
from toolchain.util.report import duration
from toolchain.util.units import gib


def render_plan(plan: BuildPlan) -> str:
    lines = [
        f"vLLM {plan.vllm_version} for {plan.arch}, target {plan.target_isa} "
        f"({plan.isa_model}); wheel version {plan.wheel_version}",
        f"runs on CPUs with {' '.join(plan.min_isa)}",
        plan.target_note,
        *_macos(plan),
        _kernels(plan),
        *(
            [
                f"expected compile: {plan.expected.cpu_seconds:,.0f} CPU-seconds, "
                f"{duration(plan.expected.wall_seconds)} (the build of {plan.expected.manifest})"
            ]
            if plan.expected
            else []
        ),
        f"Python {plan.python.version} ({plan.python.interpreter}), "
        f"{plan.torch.requirement} from {plan.torch.index_url}",
        f"compiler {plan.compiler.cxx} {plan.compiler.version} ({plan.compiler.origin})",
        *_cross(plan),
        *(
            [
                f"compile cache {plan.shared_cache.where} ({plan.shared_cache.backend}, through "
                f"{plan.shared_cache.requirement}; credentials from the environment)"
            ]
            if plan.shared_cache
            else []
        ),
        *(
            [
                f"distributed compiles: {plan.dist.scheduler}, {plan.dist.servers} build "
                f"server(s) with {plan.dist.remote_cpus} CPUs; a job here preprocesses, "
                f"{gib(plan.dist.preprocess_bytes)} each"
            ]
            if plan.dist
            else []
        ),
        *plan.jobs.describe(),
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


def _macos(plan: BuildPlan) -> list[str]:
    if plan.macos is None:
        return []
    mac = plan.macos
    built_on = f"this Mac runs {mac.build_macos}" if mac.build_macos else "the Mac's macOS unknown"
    return [
        f"macOS: wheel tag {mac.wheel_platform} (MACOSX_DEPLOYMENT_TARGET {mac.deployment_target}"
        f"; {built_on}); Apple clang >= {mac.clang_min}"
        + (f", -march={mac.march}" if mac.march else "")
        + "; no libnuma, no oneDNN, no Arm Compute Library (upstream's macOS build)"
    ]


def _cross(plan: BuildPlan) -> list[str]:
    cross = plan.cross
    acl = {
        None: [],
        True: ["Arm Compute Library: on"],
        False: ["Arm Compute Library: off (the source mirror has no ACL archive)"],
    }[plan.arm_acl]
    if cross is None:
        return acl
    packages = ", ".join(f"{p.package} {p.version}" for p in cross.sysroot_packages)
    return [
        f"cross build: build machine {cross.build_machine}, host machine {cross.host_machine}; "
        f"wheel platform {cross.wheel_platform} (manylinux_*_{cross.host_machine} once repaired)",
        f"sysroot {cross.sysroot} (Debian {cross.release}: {packages})",
        f"toolchain file {cross.toolchain_file}",
        f"target torch: {cross.torch_requirement}, else {cross.torch_fallback} through a "
        f"CUDA-free view ({cross.torch_platform})",
        *acl,
    ]


def _kernels(plan: BuildPlan) -> str:
    tiers = (
        f"kernel tiers {', '.join(plan.kernel_tiers)}"
        if plan.kernel_tiers
        else "one kernel library _C"
    )
    onednn = f"oneDNN up to {plan.onednn_isa}" if plan.onednn_isa else "oneDNN as upstream has it"
    if plan.macos is not None:
        onednn = "no oneDNN"
    if plan.onednn_prune is not None:
        onednn += f" without the {plan.onednn_prune.units} units it never links"
    elif plan.macos is None:
        onednn += ", every unit compiled (no prune list for this target: learn-prune makes one)"
    headers = "the lean <torch/all.h>" if plan.torch_headers == "lean" else "torch's own all.h"
    if plan.precompiled_headers:
        headers += f", precompiled once for {', '.join(plan.precompiled_headers)}"
    return (
        f"{tiers}; {onednn}; vLLM's kernels built {plan.build_type} at -{plan.opt_level} "
        f"with {headers}"
    )
