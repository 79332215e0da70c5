"""Describe the vLLM install of the Python running this, as JSON on a `RESULT ` line.

Run with the Python of the environment under test, from a folder without a `vllm/` in it:
    python probe_env.py [--load-kernels]
It imports torch and vLLM's platform and reads which OpenMP runtimes the process mapped; with
--load-kernels, after vLLM loaded the kernel tier it picks for this CPU
(`current_platform.import_kernels()`), which a CPU lacking its instructions answers with SIGILL.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
OPENMP = re.compile(r"/(libgomp|libiomp5|libomp)[^/]*\.so[^/]*$")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _try_import(name: str) -> str:
    try:
        importlib.import_module(name)
    except Exception as exc:  # a CUDA build beside a CPU torch fails in many ways
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return ""


def _mapped_openmp() -> list[str]:
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            match = OPENMP.search(line.strip())
            if match:
                found.add(line.split()[-1])
    return sorted(found)


def _platform(load_kernels: bool) -> dict[str, Any]:
    try:
        from vllm.platforms import current_platform

        device = str(current_platform.device_type)
        if device == "cpu" and load_kernels:
            current_platform.import_kernels()
        return {"device_type": device, "error": ""}
    except Exception as exc:
        return {"device_type": "", "error": f"{type(exc).__name__}: {exc}"[:500]}


def main() -> int:
    import torch

    owners = metadata.packages_distributions().get("vllm", [])
    report: dict[str, Any] = {
        "python": sys.executable,
        "vllm_distributions": {name: _version(name) for name in owners},
        "vllm_version_of_vllm": _version("vllm"),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "companions": {
            name: {"version": _version(name), "import_error": _try_import(name)}
            for name in COMPANIONS
            if _version(name)
        },
        "platform": _platform("--load-kernels" in sys.argv[1:]),
        "kernels_loaded": "--load-kernels" in sys.argv[1:],
        "openmp_runtimes": _mapped_openmp(),
        "torch_threads": torch.get_num_threads(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "intel_openmp": sorted(str(p) for p in Path(sys.prefix, "lib").glob("libiomp5*.so")),
        "console_script": str(Path(sys.executable).with_name("vllm")),
        "console_script_exists": Path(sys.executable).with_name("vllm").is_file(),
    }
    import vllm

    package = Path(vllm.__file__).parent if vllm.__file__ else None
    report["vllm_package"] = str(package) if package else None
    report["bundled_tcmalloc"] = (
        [str(p) for p in (package / "libs").glob("libtcmalloc*.so*")] if package else []
    )
    print("RESULT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
