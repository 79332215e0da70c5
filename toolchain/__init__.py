"""vllm-cpu-builder: build, verify and publish vLLM wheels for CPUs."""

from __future__ import annotations

__version__ = "0.1.0"
