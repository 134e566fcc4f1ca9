"""A row's forecast and Min-K% line from one pass over its prompt (llm_jobs.fused).

Checked against today's two passes (the forecast job, then the Min-K% job) on the same
rows: the same keys, the same answers, the same Min-K% lines; the plan before the
confirmation counts each row's request once; a row missing only one task's line is
asked by that task alone; and on the demo's SmolLM2-135M-Instruct (GGUF) the backend's
shared pass gives the two passes' answers and Min-K% lines.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from test_jobs_transformers import lines, make_study, run_job

from llm_jobs import fused
from llm_jobs.context import make_context

FLAGS = ("--yes", "--accept-low-parse-rate")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from test_jobs_transformers import GGUF_DIR, GGUF_FILE, _tiny_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(GGUF_DIR), gguf_file=GGUF_FILE)
    d = tmp_path_factory.mktemp("model") / "random"
    _tiny_model(tok).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def by_row(path: Path) -> dict[str, dict]:
    return {r["row_id"]: r for r in lines(path)}


def sent(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_run_all_asks_each_row_once_and_the_plan_says_so(tmp_path, tiny):
    study = make_study(tmp_path, tiny, n=12, lap_measures=["recall", "mink", "minkpp"])
    log = tmp_path / "q.log"
    res = run_job("run_all", study, *FLAGS, env={"LOOKAHEAD_QUERY_LOG": str(log)})
    table = res.stdout.split("== the whole run ==")[1].split("? yes")[0]
    assert re.search(r"^forecast\+mink\s+12\s", table, re.M), table
    assert not re.search(r"^(forecast|mink)\s", table, re.M), table  # not counted twice
    forecast, mink = by_row(tmp_path / "raw/forecast.jsonl"), by_row(tmp_path / "raw/mink.jsonl")
    assert len(forecast) == len(mink) == 12
    assert sorted(sent(log)) == sorted(
        [r["key"] for r in forecast.values()] + [r["key"] for r in lines(tmp_path / "raw/recall.jsonl")]
    )
    assert all(t.get("vocab_mean") is not None for r in mink.values() for t in r["prompt_logprobs"][1:])
    assert "mink: 12 prompts; cached (identical key): 12; to query: 0" in res.stdout
    pairs = len(lines(tmp_path / "raw/recall.jsonl"))
    assert re.search(rf"^whole run\s+{12 + pairs}\s", table, re.M), table


def test_one_pass_writes_the_lines_the_two_jobs_write(tmp_path, tiny):
    two, one = tmp_path / "two", tmp_path / "one"
    for d in (two, one):
        d.mkdir()
    s2, s1 = make_study(two, tiny, n=10), make_study(one, tiny, n=10)
    run_job("forecast", s2, *FLAGS)
    run_job("mink", s2, "--yes")
    run_job("run_all", s1, *FLAGS)
    for task in ("forecast", "mink"):
        a, b = by_row(two / f"raw/{task}.jsonl"), by_row(one / f"raw/{task}.jsonl")
        assert a.keys() == b.keys() and len(a) == 10
        for row, x in a.items():
            y = b[row]
            assert (x["key"], x["params"], x["prompt"], x["query_text"]) == (y["key"], y["params"], y["prompt"], y["query_text"])
            if task == "mink":  # the same pass Min-K% runs alone
                assert x["prompt_logprobs"] == y["prompt_logprobs"] and x["zlib_bytes"] == y["zlib_bytes"]
            else:  # the answer's first position comes from the prompt pass (Min-K%'s precision)
                assert x["response_text"] == y["response_text"]
                assert [t["token_id"] for t in x["top_logprobs"]] == [t["token_id"] for t in y["top_logprobs"]]
                assert (
                    max(abs(s["logprob"] - t["logprob"]) for s, t in zip(x["top_logprobs"], y["top_logprobs"], strict=False))
                    < 1e-3
                )


def test_a_row_missing_one_task_is_asked_by_that_task_alone(tmp_path, tiny):
    study = make_study(tmp_path, tiny, n=10)
    run_job("run_all", study, *FLAGS)
    raw = tmp_path / "raw"
    for task, gone in (("mink", {"r0001", "r0002", "r0003"}), ("forecast", {"r0005", "r0006"})):
        kept = [
            x
            for x in (raw / f"{task}.jsonl").read_text().splitlines(keepends=True)
            if not any(f'"row_id":"{r}"' in x for r in gone)
        ]
        (raw / f"{task}.jsonl").write_text("".join(kept))
    log = tmp_path / "q.log"
    res = run_job("run_all", study, *FLAGS, env={"LOOKAHEAD_QUERY_LOG": str(log)})
    assert "forecast+mink: no row misses both" in res.stdout
    assert "forecast: 10 rows; cached (identical key): 8; to query: 2" in res.stdout
    assert "mink: 10 prompts; cached (identical key): 7; to query: 3" in res.stdout
    assert len(sent(log)) == 5


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"backend": "openai", "base_url": "http://127.0.0.1:9/v1"}, "backend 'openai'"),
        ({"runner": "ray"}, "runner 'ray'"),
    ],
)
def test_where_the_pass_cannot_be_shared_each_task_asks_its_own(tmp_path, tiny, over, why):
    study = make_study(tmp_path, tiny, n=4, **over)
    ctx = make_context(fused_args(study))
    assert why in (fused.why_not(ctx) or "")


def fused_args(study: Path):
    from llm_jobs.cli import arg_parser

    return arg_parser("test").parse_args(["--study", str(study), "--yes"])


def test_on_the_demo_model_one_pass_gives_the_two_passes_answers_and_min_k_lines(monkeypatch):
    """SmolLM2-135M-Instruct from its GGUF, as the demo study loads it, on the demo's own
    forecast prompts in its chat template. The backend parses the GGUF file once for its
    tokenizer, its config and its weights (test_gguf_load.py)."""
    import gguf
    from test_gguf_load import counted_parses

    parses, CountingReader = counted_parses(monkeypatch)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from llm_workload import SMOLLM2_GGUF, smollm2_dir

    from lookahead.backends.transformers_backend import TransformersBackend
    from lookahead.config import load_study
    from lookahead.keys import forecast_prompt_column
    from lookahead.rows import load_rows

    study = load_study()
    texts = forecast_prompt_column(study, load_rows(study)[0]).to_pylist()[:6]
    b = TransformersBackend("smollm2", model_path=str(smollm2_dir()), gguf_file=SMOLLM2_GGUF, batch_size=3)
    prompts = [b.render_prompt(t, True) for t in texts]
    assert b.context_length() == 8192  # the config, read before the weights
    mt = int(study.prompts.forecast_max_tokens)
    assert b.fused_scoring()
    gens, scored = b.generate(prompts, mt, 20), b.prompt_logprobs(prompts, vocab_moments=True)
    one = b.generate_scored(prompts, mt, 20, vocab_moments=True)
    assert len(parses) == 1 and gguf.GGUFReader is CountingReader  # one parse; gguf's own put back
    assert b._gguf_readers == {}  # the parse dropped once the weights are in
    assert [g.response_text for g in gens] == [g.response_text for g, _ in one]
    assert scored == [e for _, e in one]
    for g, (h, _) in zip(gens, one, strict=False):
        assert [t.token_id for t in g.top_logprobs[:5]] == [t.token_id for t in h.top_logprobs[:5]]
        assert max(abs(s.logprob - t.logprob) for s, t in zip(g.top_logprobs[:5], h.top_logprobs[:5], strict=False)) < 1e-3
