"""The claim jobs end to end on the transformers backend with the shipped claim demo
models (tiny, so the whole demo scores in seconds): coalition values, TimeSPEC, kill -9
and resume, and the dbt claim models built from the result.

The demo's answers are known: OLR follows exactly from the planted claims, and the
model trained to rely on the leaked outcome claim gets a high Shapley-DCLR while the
one trained to ignore it gets a low one (lookahead/claims/demo.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lookahead.claims.tables import build
from lookahead.config import load_study

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "claims"
PY = sys.executable

pytestmark = pytest.mark.skipif(not (DEMO / "models" / "leaky" / "model.safetensors").exists(),
                                reason="claim demo models not built")


def _study(tmp_path: Path, model: str, **kw) -> Path:
    v = yaml.safe_load((DEMO / f"{model}.yml").read_text())
    v.update({"raw_dir": str(tmp_path / f"raw_{model}"), "batch_size": 64, **kw})
    p = tmp_path / f"{model}.yml"
    p.write_text(yaml.safe_dump(v))
    return p


def _run(job: str, study: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([PY, "-m", f"llm_jobs.{job}", "--study", str(study), "--yes"], cwd=ROOT, env=e,
                          capture_output=True, text=True, timeout=600)


def _lines(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """Both demo models: TimeSPEC then coalition values, in subprocesses as a user runs them."""
    tmp = tmp_path_factory.mktemp("claims_jobs")
    out = {}
    for model in ("leaky", "prudent"):
        study = _study(tmp, model)
        for job in ("claims_timespec", "claims_value"):
            res = _run(job, study)
            assert res.returncode == 0, res.stdout + res.stderr
        out[model] = (study, build(load_study(study)))
    return out


def test_demo_known_answers(scored):
    truth = pd.read_csv(DEMO / "truth_instances.csv").set_index("instance_id")
    dclr = {}
    for model, (_, t) in scored.items():
        inst = t["instance_leakage"]
        planted = inst[(inst["agent"] == "planted") & (inst["status"] == "ok")].set_index("instance_id")
        assert len(planted) == 29
        assert (planted["olr"] == truth.loc[planted.index, "expected_olr"]).all()   # exact
        assert planted["efficiency_gap"].abs().max() < 1e-9
        dclr[model] = planted["shapley_dclr"].astype(float).mean()
        # TimeSPEC keeps only verified pre-t_ref claims: no leaked claim survives
        ts = inst[inst["agent"] == "timespec"]
        assert len(ts) == 31 and (ts["olr"].dropna() == 0).all()
    assert dclr["leaky"] > 0.4 and dclr["prudent"] < 0.1


def test_value_job_rerun_asks_nothing(scored, tmp_path):
    study, _ = scored["leaky"]
    log = tmp_path / "q.log"
    res = _run("claims_value", study, {"LOOKAHEAD_QUERY_LOG": str(log)})
    assert res.returncode == 0 and "to query: 0" in res.stdout
    assert not log.exists() or log.read_text() == ""


def test_kill9_mid_run_then_resume_without_requery(tmp_path):
    study = _study(tmp_path, "leaky", batch_size=2)
    raw = tmp_path / "raw_leaky" / "claims_value.jsonl"
    log1, log2 = tmp_path / "q1.log", tmp_path / "q2.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "LOOKAHEAD_QUERY_LOG": str(log1)}
    proc = subprocess.Popen([PY, "-m", "llm_jobs.claims_value", "--study", str(study), "--yes"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            if raw.exists() and raw.read_text().count("\n") >= 20:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    done = {r["key"] for r in _lines(raw)}
    with open(raw, "a") as fh:
        fh.write('{"key": "torn-half')
    res = _run("claims_value", study, {"LOOKAHEAD_QUERY_LOG": str(log2)})
    assert res.returncode == 0, res.stderr
    assert "repaired a torn last line" in res.stdout
    keys = [r["key"] for r in _lines(raw)]
    assert len(keys) == len(set(keys))
    assert 20 <= len(done) < len(keys), "job finished before the kill"
    assert not set(log2.read_text().split()) & done
    t = build(load_study(study))["instance_leakage"]
    assert (t.loc[t["agent"] == "planted", "status"].isin(["ok", "empty rationale", "no claims"])).all()


def test_dbt_claim_models(scored, tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from dbt_runner import run_dbt

    study, _ = scored["leaky"]
    res = run_dbt(["build", "--select", "tag:claims"], yaml.safe_load(study.read_text()), tmp_path / "c.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    claims = res.table("claims")
    for col in ("instance_id", "claim_id", "claim_text", "category", "temporal_reference", "tau",
                "leakage_state", "shapley"):
        assert col in claims.columns
    inst = res.table("instance_leakage")
    for col in ("instance_id", "agent", "n_claims", "olr", "shapley_dclr", "shapley_dclr_unverifiable_leaked",
                "top1_leakage", "top3_leakage", "v_all", "v_empty", "shapley_sum"):
        assert col in inst.columns
    assert set(inst["agent"]) == {"planted", "timespec"}
    assert set(res.table("claims_summary")["agent"]) == {"planted", "timespec"}
