"""The serve check's HTTP conversation, against a fake server that answers like vLLM 0.32."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolchain.verify.openai_api import exercise, prompt_counter, sse_events

METRICS = """# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 19.0
vllm:prompt_tokens_cached_total{engine="0",model_name="m"} 0.0
"""


def _usage(prompt: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": 8, "total_tokens": prompt + 8}


def _stream(chunks: int, usage: dict[str, int] | None) -> bytes:
    events = [{"choices": [{"text": "x"}]} for _ in range(chunks)]
    if usage:
        events.append({"choices": [], "usage": usage})
    lines = [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


class FakeClock:
    """openai_api's `time`: sleeping moves the clock on at once, so waits cost no real time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr("toolchain.verify.openai_api.time", fake)
    return fake


class FakeServer:
    def __init__(
        self,
        metrics: str = METRICS,
        stream: bytes = _stream(8, _usage(13)),
        late_metrics: list[str] | None = None,
    ) -> None:
        self.metrics, self.stream = metrics, stream
        self.late_metrics = late_metrics or []  # answers before `metrics`: a lagging counter
        self.requests: list[tuple[str, Any]] = []

    def __call__(
        self, url: str, body: bytes | None = None, timeout: float = 0
    ) -> tuple[int, bytes]:
        path = url.split("8000", 1)[1]
        payload = json.loads(body) if body else None
        self.requests.append((path, payload))
        if path == "/v1/models":
            return 200, json.dumps({"data": [{"id": "m"}]}).encode()
        if path == "/metrics":
            return 200, (self.late_metrics.pop(0) if self.late_metrics else self.metrics).encode()
        if payload and payload.get("stream"):
            return 200, self.stream
        prompt = 2 if path == "/v1/completions" else 4
        return 200, json.dumps({"usage": _usage(prompt)}).encode()


def test_all_endpoints_and_a_matching_prompt_counter_pass() -> None:
    server = FakeServer()
    report = exercise("http://127.0.0.1:8000", "m", server)
    assert report.problems == []
    assert report.prompt_tokens == 19 and report.details["metrics_prompt_tokens"] == 19.0
    paths = [path for path, _ in server.requests]
    assert paths[:4] == ["/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/completions"]
    assert server.requests[3][1]["stream_options"] == {"include_usage": True}


def test_a_counter_that_disagrees_with_the_usage_is_a_problem(clock: FakeClock) -> None:
    server = FakeServer(metrics=METRICS.replace(" 19.0", " 25.0"))
    report = exercise("http://127.0.0.1:8000", "m", server)
    assert report.problems == [
        "/metrics vllm:prompt_tokens_total is 25.0, but the responses reported 19 prompt tokens"
    ]
    # asked once a second until the 10 s the engine's logger may lag had passed
    assert sum(clock.slept) == 11 and [p for p, _ in server.requests].count("/metrics") == 12


def test_a_counter_that_catches_up_within_the_wait_passes(clock: FakeClock) -> None:
    behind = METRICS.replace(" 19.0", " 6.0")
    server = FakeServer(late_metrics=[behind, behind])
    report = exercise("http://127.0.0.1:8000", "m", server)
    assert report.problems == [] and report.details["metrics_prompt_tokens"] == 19.0
    assert clock.slept == [1, 1]


def test_a_stream_without_usage_or_chunks_is_a_problem(clock: FakeClock) -> None:
    report = exercise("http://127.0.0.1:8000", "m", FakeServer(stream=_stream(1, None)))
    assert "streaming /v1/completions answered 200 with 1 text chunks and no usage event" in (
        report.problems
    )


def test_the_counter_sums_label_sets_and_ignores_similar_names() -> None:
    text = METRICS + 'vllm:prompt_tokens_total{engine="1",model_name="m"} 3.0\n'
    assert prompt_counter(text) == 22.0
    assert prompt_counter("vllm:generation_tokens_total 5.0\n") is None


def test_sse_events_stop_at_done() -> None:
    body = b'data: {"a": 1}\n\n: keep-alive\n\ndata: [DONE]\n\ndata: {"b": 2}\n\n'
    assert sse_events(body) == [{"a": 1}]
