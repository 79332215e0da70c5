"""Exercise a running OpenAI-compatible vLLM server and check /metrics against the usage.

Every response reports `usage.prompt_tokens`; the server's `vllm:prompt_tokens_total` counter
must end at their sum, or the server counts work it did not report (or the reverse).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolchain.util.datafile import parse_json
from toolchain.verify.server import http

PROMPT_COUNTER = "vllm:prompt_tokens_total"
Fetch = Callable[..., tuple[int, bytes]]


@dataclass
class ApiReport:
    problems: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    details: dict[str, Any] = field(default_factory=dict)


def prompt_counter(metrics_text: str) -> float | None:
    """The sum of the prompt-token counter over its label sets, or None if it is absent."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith(PROMPT_COUNTER + "{") or line.startswith(PROMPT_COUNTER + " ")
    ]
    return sum(values) if values else None


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON events of a server-sent-event stream, up to `data: [DONE]`."""
    events = []
    for line in body.decode().splitlines():
        if not line.startswith("data: "):
            continue
        data = line.removeprefix("data: ").strip()
        if data == "[DONE]":
            break
        events.append(parse_json(data, where="a streamed event"))
    return events


def _post(fetch: Fetch, url: str, payload: dict[str, Any]) -> tuple[int, bytes]:
    return fetch(url, json.dumps(payload).encode())


def exercise(base: str, model: str, fetch: Fetch = http) -> ApiReport:
    report = ApiReport()
    code, body = fetch(f"{base}/v1/models")
    answer = parse_json(body, where="/v1/models") if code == 200 else {}
    served = [m.get("id") for m in answer.get("data", [])]
    report.details["models"] = served
    if model not in served:
        report.problems.append(f"/v1/models answered {code} without {model!r}: {served}")
    requests = {
        "completions": ("/v1/completions", {"prompt": "hello world", "max_tokens": 8}),
        "chat": (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8},
        ),
    }
    for name, (path, payload) in requests.items():
        code, body = _post(fetch, base + path, {"model": model, "temperature": 0, **payload})
        if code != 200:
            report.problems.append(f"{path} answered {code}: {body[:300]!r}")
            continue
        usage = parse_json(body, where=path)["usage"]
        report.prompt_tokens += usage["prompt_tokens"]
        report.details[name] = usage
    _stream(base, model, fetch, report)
    _metrics(base, fetch, report)
    return report


def _stream(base: str, model: str, fetch: Fetch, report: ApiReport) -> None:
    payload = {
        "model": model,
        "prompt": "count with me",
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    code, body = _post(fetch, f"{base}/v1/completions", payload)
    events = sse_events(body) if code == 200 else []
    pieces = [e for e in events if e.get("choices")]
    usage = next((e["usage"] for e in reversed(events) if e.get("usage")), None)
    report.details["stream"] = {"chunks": len(pieces), "usage": usage}
    if code != 200 or len(pieces) < 2 or usage is None:
        report.problems.append(
            f"streaming /v1/completions answered {code} with {len(pieces)} text chunks "
            f"and {'a' if usage else 'no'} usage event"
        )
        return
    report.prompt_tokens += usage["prompt_tokens"]


def _metrics(base: str, fetch: Fetch, report: ApiReport, wait: float = 10) -> None:
    counted = None
    deadline = time.monotonic() + wait
    while True:  # the counter is updated by the engine's logger shortly after a request ends
        code, body = fetch(f"{base}/metrics")
        counted = prompt_counter(body.decode()) if code == 200 else None
        if counted == report.prompt_tokens or time.monotonic() > deadline:
            break
        time.sleep(1)
    report.details["metrics_prompt_tokens"] = counted
    report.details["usage_prompt_tokens"] = report.prompt_tokens
    if counted != report.prompt_tokens:
        report.problems.append(
            f"/metrics {PROMPT_COUNTER} is {counted}, but the responses reported "
            f"{report.prompt_tokens} prompt tokens"
        )
