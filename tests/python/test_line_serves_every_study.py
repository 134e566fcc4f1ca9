"""A cached line is found by the forward pass it holds, never by the measures read from it.

A user's sequence on one raw_dir, counted from the raw files (lines per task) and from the
query log (keys sent): build with [recall, mink]; add minkpp; drop it again; edit one
row; run a second study with fewer measures. Each step asks exactly what it must:
- on transformers every Min-K% line carries the vocabulary moments and the zlib length
  (they cost about nothing in the same pass), so adding Min-K%++ asks nothing;
- on a backend that computes the moments only when asked, adding Min-K%++ asks each
  row's Min-K% prompt again, once, and nothing after;
- a cache written when the extras joined the key (`line_extras` in the params) is read
  as it is: nothing asked again that it can serve, by the jobs and by the build.
The build's reading is checked by running the dbt models that score the lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dbt_runner import run_dbt
from test_jobs_transformers import lines, make_study, recompute_key, run_job

TASKS = ("forecast", "recall", "mink")
N = 10
FLAGS = {"forecast": ["--accept-low-parse-rate"], "recall": [], "mink": []}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The tiny models of test_jobs_transformers: random weights, and one that answers "up"."""
    from test_jobs_transformers import GGUF_DIR, GGUF_FILE, _tiny_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(GGUF_DIR), gguf_file=GGUF_FILE)
    out = {}
    for name, always in (("random", None), ("up", "up")):
        d = tmp_path_factory.mktemp("models") / name
        _tiny_model(tok, always).save_pretrained(d)
        tok.save_pretrained(d)
        out[name] = d
    return out


def set_measures(study: Path, measures: list[str], **more) -> None:
    y = yaml.safe_load(study.read_text())
    y.update({"lap_measure": "recall", "lap_measures": measures, **more})
    study.write_text(yaml.safe_dump(y))


def counts(raw: Path) -> dict[str, int]:
    """Lines per task over every shard of raw_dir."""
    return {t: sum(len(lines(p)) for p in raw.glob(f"**/{t}.jsonl")) for t in TASKS}


def run_jobs(study: Path, log: Path) -> dict[str, int]:
    """Every job of the study once; the keys each sent (from the query log)."""
    sent = {}
    for job in TASKS:
        log.unlink(missing_ok=True)
        run_job(job, study, "--yes", *FLAGS[job], env={"LOOKAHEAD_QUERY_LOG": str(log)})
        sent[job] = len(log.read_text().split()) if log.exists() else 0
    return sent


def step(study: Path, raw: Path, log: Path) -> dict[str, int]:
    """The jobs run once: keys sent per task, which the raw files must show as new lines."""
    before = counts(raw)
    sent = run_jobs(study, log)
    after = counts(raw)
    assert {t: after[t] - before[t] for t in TASKS} == sent
    return sent


def has_moments(rec: dict) -> bool:
    return all(isinstance(t.get("vocab_mean"), float) for t in rec["prompt_logprobs"][1:])


def scored_rows(study: Path, tmp: Path, name: str) -> dict[str, int]:
    """Rows the build scores per prompt measure (the dbt models reading the raw lines)."""
    vars_ = yaml.safe_load(study.read_text())
    res = run_dbt(["run", "--select", "+int_mink_scores", "+int_lap_zlib", "+int_lap_minkpp"], vars_, tmp / f"{name}.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    return {
        "mink": int(res.table("int_mink_scores")["lap_mink"].notna().sum()),
        "zlib": int(res.table("int_lap_zlib")["lap_zlib"].notna().sum()),
        "minkpp": int(res.table("int_lap_minkpp")["lap_minkpp"].notna().sum()),
    }


def test_the_users_sequence_on_transformers_asks_each_answer_once(tmp_path, models):
    study = make_study(tmp_path, models["up"], n=N)
    raw, log = tmp_path / "raw", tmp_path / "q.log"
    set_measures(study, ["recall", "mink"])
    first = step(study, raw, log)
    assert first["forecast"] == first["mink"] == N and first["recall"] > 0
    assert all(has_moments(r) and r["zlib_bytes"] > 0 for r in lines(raw / "mink.jsonl"))
    assert all("line_extras" not in r["params"] for r in lines(raw / "mink.jsonl"))
    set_measures(study, ["recall", "mink", "minkpp"])
    assert step(study, raw, log) == {"forecast": 0, "recall": 0, "mink": 0}  # the moments are in the lines
    assert scored_rows(study, tmp_path, "minkpp") == {"mink": N, "zlib": N, "minkpp": N}
    set_measures(study, ["recall", "mink"])
    assert step(study, raw, log) == {"forecast": 0, "recall": 0, "mink": 0}
    df = pd.read_csv(tmp_path / "obs.csv", dtype=str)
    df.loc[3, "text"] = df.loc[3, "text"] + " (corrected)"
    df.to_csv(tmp_path / "obs.csv", index=False)
    assert step(study, raw, log) == {"forecast": 1, "recall": 0, "mink": 1}
    second = tmp_path / "second.yml"
    second.write_text(study.read_text())
    set_measures(second, ["recall"], study_name="second", outputs_dir=str(tmp_path / "out2"))
    assert step(second, raw, log) == {"forecast": 0, "recall": 0, "mink": 0}


def test_a_study_needing_extras_a_line_lacks_asks_only_for_those_rows(tmp_path, models, monkeypatch):
    """A backend that computes the vocabulary moments only when a measure needs them:
    adding Min-K%++ asks each Min-K% prompt again once (a second line of the same key,
    carrying them), the build reads the richer line, and dropping Min-K%++ asks nothing."""
    from lookahead.backends.transformers_backend import TransformersBackend

    monkeypatch.setattr(TransformersBackend, "free_extras", ())
    study = make_study(tmp_path, models["up"], n=N)
    raw, log = tmp_path / "raw", tmp_path / "q.log"
    set_measures(study, ["recall", "mink"])
    step(study, raw, log)
    assert not any(has_moments(r) for r in lines(raw / "mink.jsonl"))
    set_measures(study, ["recall", "mink", "minkpp"])
    assert step(study, raw, log) == {"forecast": 0, "recall": 0, "mink": N}
    mink = lines(raw / "mink.jsonl")
    assert len({r["key"] for r in mink}) == N and sum(has_moments(r) for r in mink) == N
    assert step(study, raw, log) == {"forecast": 0, "recall": 0, "mink": 0}
    assert scored_rows(study, tmp_path, "minkpp") == {"mink": N, "zlib": N, "minkpp": N}
    set_measures(study, ["recall", "mink"])
    assert step(study, raw, log) == {"forecast": 0, "recall": 0, "mink": 0}


def as_written_before(raw: Path, extras: list[str]) -> None:
    """The Min-K% file rewritten as the jobs wrote it when the extras joined the key: the
    params name them (``line_extras``) and the key hashes them."""
    recs = lines(raw / "mink.jsonl")
    for r in recs:
        r["params"] = {**r["params"], "line_extras": extras}
        if "vocab_moments" not in extras:
            r["prompt_logprobs"] = [
                {k: v for k, v in t.items() if k not in ("vocab_mean", "vocab_var")} for t in r["prompt_logprobs"]
            ]
        r["key"] = recompute_key(r)
    (raw / "mink.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")


def test_a_cache_keyed_with_its_extras_is_read_with_nothing_asked_again(tmp_path, models, monkeypatch):
    from lookahead.backends.transformers_backend import TransformersBackend

    monkeypatch.setattr(TransformersBackend, "free_extras", ())
    study = make_study(tmp_path, models["up"], n=N)
    raw, log = tmp_path / "raw", tmp_path / "q.log"
    set_measures(study, ["recall", "mink", "zlib"])
    step(study, raw, log)
    as_written_before(raw, ["zlib_bytes"])
    old_keys = {r["key"] for r in lines(raw / "mink.jsonl")}
    for measures in (["recall", "mink", "zlib"], ["recall", "mink"]):
        set_measures(study, measures)
        assert step(study, raw, log) == {"forecast": 0, "recall": 0, "mink": 0}, measures
    assert scored_rows(study, tmp_path, "old") == {"mink": N, "zlib": N, "minkpp": 0}
    set_measures(study, ["recall", "mink", "minkpp"])  # the old lines lack the moments
    assert step(study, raw, log) == {"forecast": 0, "recall": 0, "mink": N}
    assert old_keys <= {r["key"] for r in lines(raw / "mink.jsonl")}  # kept, never rewritten
    assert scored_rows(study, tmp_path, "new") == {"mink": N, "zlib": N, "minkpp": N}


@pytest.mark.parametrize("extras", [["vocab_moments", "zlib_bytes"], ["vocab_moments"]])
def test_an_old_line_with_the_moments_serves_min_k_plus_plus(tmp_path, models, extras):
    study = make_study(tmp_path, models["random"], n=4)
    raw, log = tmp_path / "raw", tmp_path / "q.log"
    set_measures(study, ["recall", "mink", "minkpp"])
    run_job("mink", study, "--yes")
    as_written_before(raw, extras)
    log.unlink(missing_ok=True)
    run_job("mink", study, "--yes", env={"LOOKAHEAD_QUERY_LOG": str(log)})
    assert not log.exists() or not log.read_text().split()
