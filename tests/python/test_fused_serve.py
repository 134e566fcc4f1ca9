"""The forecast and Min-K% of a row from one request to an OpenAI-compatible server that
offers vLLM's ``prompt_logprobs`` extra (llm_jobs.fused on ``backend: openai``, as
`vllm serve` answers it): one completions request with ``prompt_logprobs=0`` and
``return_token_ids`` beside ``logprobs``.

Fast tier: the loopback server of test_openai_backend.py (real sockets, the real `openai`
client; answers computed from the prompt): the plan counts each row once and exactly the
requests the server then receives, the lines equal those of the two-request route, and a
failed request is recorded for both tasks (permanent or transient) without a crash.
Slow and vllm tier: a real `vllm serve` of SmolLM2-135M-Instruct on 127.0.0.1 (as
test_backend_parity.py starts it): the same answers and prompt log-probs as the two
requests, within the parity tolerance."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_backend_parity import MODEL_DIR, TOKEN_LOGPROB_ATOL, model_dir, vllm_server  # noqa: F401 - fixtures
from test_openai_backend import server_factory, write_openai_study  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[2]


def lines(raw: Path, task: str) -> dict[str, dict[str, Any]]:
    path = raw / f"{task}.jsonl"
    return {r["row_id"]: r for r in (json.loads(x) for x in path.read_text().splitlines() if x.strip())}


def plan_table(out: str) -> dict[str, int]:
    """task -> requests, from the whole run's table printed before the confirmation (its
    sum under ``run``)."""
    table = out.split("== the whole run ==")[1].split("? yes")[0]
    return {m.group(1): int(m.group(2).replace(",", "")) for m in re.finditer(r"^(\S+)\s+([\d,]+)\s", table, re.M)}


def test_one_request_per_row_counted_by_the_plan_as_sent(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """``mink_source: prompt_logprobs``: each row's forecast and Min-K% from one request
    carrying both, the plan's table counts it once (``forecast+mink``) and its requests
    sum to what the server received; the lines (keys, answers, prompt log-probs) equal the
    two-request route's (``mink_source: auto``, where nothing tells before a request that
    the server offers the extra, so the plan counts two requests a row, as sent)."""
    from llm_jobs import run_all

    n = 12
    runs: dict[str, dict[str, Any]] = {}
    for source in ("auto", "prompt_logprobs"):
        url, state = server_factory(vary=True)
        study = write_openai_study(tmp_path, url, source, n, marks={}, mink_source=source)
        capfd.readouterr()
        assert run_all.main(["--study", str(study), "--yes"]) == 0
        out = capfd.readouterr().out
        table = plan_table(out)
        raw = tmp_path / source / "raw"
        runs[source] = {"table": table, "state": state, "raw": raw, "out": out}
        total = table.pop("run")
        assert sum(table.values()) == total == state.requests, (table, state.requests)
    one, two = runs["prompt_logprobs"], runs["auto"]
    assert one["table"].get("forecast+mink") == n and "forecast" not in one["table"] and "mink" not in one["table"]
    assert two["table"].get("forecast") == n and two["table"].get("mink") == n and "forecast+mink" not in two["table"]
    assert "forecast+mink: not one pass" in two["out"]
    fused = [p for asked, p in one["state"].answered if asked == "prompt_logprobs"]
    assert len(fused) == n == len(set(fused))  # one request per row, carrying the extra
    assert one["state"].requests == two["state"].requests - n
    for task in ("forecast", "mink"):
        a, b = lines(two["raw"], task), lines(one["raw"], task)
        assert a.keys() == b.keys() and len(a) == n
        for row, x in a.items():
            y = b[row]
            fields = ("key", "prompt", "response_text", "top_logprobs", "first_token_prob", "prompt_logprobs")
            assert {k: x.get(k) for k in fields} == {k: y.get(k) for k in fields}, (task, row)


def test_a_failed_fused_request_is_recorded_for_both_tasks_not_a_crash(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """One row the server always refuses (HTTP 400) and one it fails with HTTP 500 in the
    first run: the run finishes the other rows; the refusal is recorded once for each task,
    permanent, and not asked again; the 500 is a transient failure of both tasks, and the
    next run asks that row alone and finishes it. No traceback."""
    from llm_jobs import run_all

    url, state = server_factory(vary=True)
    state.flaky_down = True
    study = write_openai_study(tmp_path, url, "fails", 10, marks={5: "[400]", 3: "[flaky]"}, mink_source="prompt_logprobs")
    code = run_all.main(["--study", str(study), "--yes"])
    out = capfd.readouterr()
    assert code == 4 and "Traceback" not in out.err + out.out  # r3 still unanswered: resume
    raw = tmp_path / "fails" / "raw"
    for task in ("forecast", "mink"):
        recs = [json.loads(x) for x in (raw / f"{task}.failures.jsonl").read_text().splitlines()]
        assert {r["row_id"] for r in recs if r["permanent"]} == {"r5"}, recs
        assert len([r for r in recs if r["permanent"]]) == 1
        # r5's first request may come back before any row confirmed the route: then it is
        # a transient failure first, and its permanent one comes from the pass after
        assert "r3" in {r["row_id"] for r in recs if not r["permanent"]} <= {"r3", "r5"}
        assert set(lines(raw, task)) == {f"r{i}" for i in range(10)} - {"r3", "r5"}
    asked_r5 = sum(len(v) for p, v in state.attempts.items() if "[400]" in p)
    state.flaky_down = False
    assert run_all.main(["--study", str(study), "--yes"]) == 0
    out = capfd.readouterr()
    assert "Traceback" not in out.err + out.out
    for task in ("forecast", "mink"):
        assert set(lines(raw, task)) == {f"r{i}" for i in range(10)} - {"r5"}
    assert sum(len(v) for p, v in state.attempts.items() if "[400]" in p) == asked_r5  # not asked again


# ------------------------------------------------------------------ a real vllm serve


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_serve_one_request_gives_the_two_requests_lines(
    tmp_path: Path,
    vllm_server: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Against a real `vllm serve` (float32, eager): the fused request's forecast answers
    and top-20 log-probs, and every prompt token's log-prob, equal the two requests' within
    the backend parity tolerance; the same keys and token ids; the plan counts each row
    once and the Min-K% job that runs next finds every row answered."""
    from llm_jobs import run_all

    n = 8
    runs = {}
    for source in ("auto", "prompt_logprobs"):
        study = write_openai_study(
            tmp_path,
            vllm_server,
            source,
            n,
            marks={},
            mink_source=source,
            model_id="smollm2-135m-instruct",
            served_model="smollm2-135m-instruct",
            tokenizer_path=str(MODEL_DIR),
            use_chat_template=True,
            context_length=1024,
            api_mode="completions",
            backend_options={"timeout_s": 300},
        )
        capfd.readouterr()
        assert run_all.main(["--study", str(study), "--yes", "--accept-low-parse-rate"]) == 0
        runs[source] = capfd.readouterr().out
    table = plan_table(runs["prompt_logprobs"])
    assert table.get("forecast+mink") == n and "forecast" not in table and "mink" not in table, table
    assert "mink: 8 prompts; cached (identical key): 8; to query: 0" in runs["prompt_logprobs"]
    for task in ("forecast", "mink"):
        a, b = lines(tmp_path / "auto" / "raw", task), lines(tmp_path / "prompt_logprobs" / "raw", task)
        assert a.keys() == b.keys() and len(a) == n
        for row, x in a.items():
            y = b[row]
            assert (x["key"], x["prompt"], x["backend"]) == (y["key"], y["prompt"], "openai")
            if task == "forecast":
                assert x["response_text"] == y["response_text"]
                top_x = {t["token"]: t["logprob"] for t in x["top_logprobs"]}
                top_y = {t["token"]: t["logprob"] for t in y["top_logprobs"]}
                shared = top_x.keys() & top_y.keys()
                assert len(shared) >= len(top_x) - 1
                assert max(abs(top_x[t] - top_y[t]) for t in shared) < TOKEN_LOGPROB_ATOL
            else:
                px, py = x["prompt_logprobs"], y["prompt_logprobs"]
                assert [t["token_id"] for t in px] == [t["token_id"] for t in py]
                assert px[0]["logprob"] is None and py[0]["logprob"] is None
                assert max(abs(s["logprob"] - t["logprob"]) for s, t in zip(px[1:], py[1:], strict=True)) < TOKEN_LOGPROB_ATOL
