"""The forecast and Min-K% of a row from one vLLM request (llm_jobs.fused on vLLM offline):
one ``SamplingParams`` with ``prompt_logprobs=0`` beside ``logprobs``.

Checked against the two requests the forecast and Min-K% jobs send alone, on the real
SmolLM2-135M-Instruct exported to Hugging Face format (as test_backend_parity), in vLLM's
CPU build: the same keys and prompts, the same answers, and every prompt token's
log-prob within the backend parity tolerance (vLLM may batch the two ways differently, so
the arithmetic can differ in the last bits); the plan counts each row once, under
``forecast+mink``, and the Min-K% job that runs next finds every row answered.

Slow tier and the vllm tier: skipped without .venv-vllm (bash scripts/make_vllm_env.sh).
The jobs run as subprocesses in .venv-vllm, as `lookahead run` runs them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from test_backend_parity import MODEL_DIR, TOKEN_LOGPROB_ATOL, VLLM_PYTHON, model_dir  # noqa: F401 - fixture
from test_jobs_transformers import make_study

from lookahead.backends.vllm_serve import vllm_env

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[2]
VLLM = {"dtype": "float32", "enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 1024}


def job(module: str, study: Path, *flags: str) -> str:
    """A job of the registry alone (`--only`), or "run_all": every job the study needs."""
    only = [] if module == "run_all" else ["--only", module]
    proc = subprocess.run(
        [str(VLLM_PYTHON), "-m", "llm_jobs.run_all", *only, "--study", str(study), "--yes", *flags],
        cwd=ROOT,
        env={**vllm_env(), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def by_row(path: Path) -> dict[str, dict]:
    return {r["row_id"]: r for r in (json.loads(x) for x in path.read_text().splitlines() if x.strip())}


def test_one_vllm_request_writes_the_lines_of_the_two_jobs(tmp_path: Path, model_dir: Path) -> None:
    two, one = tmp_path / "two", tmp_path / "one"
    studies = {}
    for d in (two, one):
        d.mkdir()
        studies[d] = make_study(
            d,
            model_dir,
            n=8,
            backend="vllm",
            model_id="smollm2-135m-instruct",
            backend_options=VLLM,
            lap_measures=["recall", "mink"],
        )
    job("forecast", studies[two], "--accept-low-parse-rate")
    job("mink", studies[two])
    out = job("run_all", studies[one], "--accept-low-parse-rate")
    table = out.split("== the whole run ==")[1].split("? yes")[0]
    assert re.search(r"^forecast\+mink\s+8\s", table, re.M), table
    assert not re.search(r"^(forecast|mink)\s", table, re.M), table  # each row's request counted once
    assert "mink: 8 prompts; cached (identical key): 8; to query: 0" in out
    for task in ("forecast", "mink"):
        a, b = by_row(two / "raw" / f"{task}.jsonl"), by_row(one / "raw" / f"{task}.jsonl")
        assert a.keys() == b.keys() and len(a) == 8
        for row, x in a.items():
            y = b[row]
            assert (x["key"], x["prompt"], x["backend"]) == (y["key"], y["prompt"], "vllm")
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
