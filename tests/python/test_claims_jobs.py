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
from pathlib import Path

import pandas as pd
import pytest
import yaml
from kill_job import kill_once_written

from lookahead.claims.tables import build
from lookahead.config import load_study

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "claims"
PY = sys.executable

pytestmark = pytest.mark.skipif(
    not (DEMO / "models" / "leaky" / "model.safetensors").exists(), reason="claim demo models not built"
)


def _study(tmp_path: Path, model: str, **kw) -> Path:
    v = yaml.safe_load((DEMO / f"{model}.yml").read_text())
    proto = tmp_path / "protocol_raw"  # dbt's input check wants the protocol's raw files to exist
    proto.mkdir(exist_ok=True)
    for task in ("forecast", "recall", "mink"):
        (proto / f"{task}.jsonl").touch()
    v.update({"raw_dir": str(proto), "claims_raw_dir": str(tmp_path / f"raw_{model}"), "batch_size": 64, **kw})
    p = tmp_path / f"{model}.yml"
    p.write_text(yaml.safe_dump(v))
    return p


def _run(job: str, study: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [PY, "-m", "llm_jobs.run_all", "--only", job, "--study", str(study), "--yes"],
        cwd=ROOT,
        env=e,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _lines(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


SUBSET = ("c01", "c05", "c08", "c30", "c31")  # 3, 4 and 4 claims, an empty rationale, no claims


def _subset_study(tmp: Path, model: str) -> Path:
    """The demo restricted to a few small instances, so the default suite stays fast."""
    preds = pd.read_csv(DEMO / f"predictions_{model}.csv", dtype=str, keep_default_na=False)
    insts = pd.read_csv(DEMO / "instances.csv", dtype=str, keep_default_na=False)
    preds[preds["instance_id"].isin(SUBSET)].to_csv(tmp / f"pred_{model}.csv", index=False)
    insts[insts["instance_id"].isin(SUBSET)].to_csv(tmp / "instances.csv", index=False)
    return _study(
        tmp, model, claims_predictions_path=str(tmp / f"pred_{model}.csv"), claims_instances_path=str(tmp / "instances.csv")
    )


def _score(study: Path) -> dict:
    """TimeSPEC then coalition values, in-process (the kill test runs real subprocesses)."""
    import contextlib
    import io

    from llm_jobs import run_all

    for job in ("claims_timespec", "claims_value"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = run_all.main(["--only", job, "--study", str(study), "--yes"])
        assert rc == 0, buf.getvalue()
    return build(load_study(study))


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The leaky model on the subset: TimeSPEC then coalition values, as subprocesses."""
    tmp = tmp_path_factory.mktemp("claims_jobs")
    study = _subset_study(tmp, "leaky")
    return {"leaky": (study, _score(study))}


def test_subset_known_answers(scored):
    truth = pd.read_csv(DEMO / "truth_instances.csv").set_index("instance_id")
    _, t = scored["leaky"]
    inst = t["instance_leakage"]
    planted = inst[inst["agent"] == "planted"].set_index("instance_id")
    assert planted.loc["c30", "status"] == "empty rationale" and planted.loc["c31", "status"] == "no claims"
    ok = planted[planted["status"] == "ok"]
    assert list(ok.index) == ["c01", "c05", "c08"]
    assert (ok["olr"] == truth.loc[ok.index, "expected_olr"]).all()  # exact
    assert ok["efficiency_gap"].abs().max() < 1e-9
    ts = inst[(inst["agent"] == "timespec") & (inst["status"] == "ok")]
    assert len(ts) == 3 and (ts["olr"] == 0).all()
    claims = t["claims"]
    assert set(claims.loc[claims["category"] == "A4", "leakage_state"]) <= {"leaked"}


@pytest.mark.slow
def test_full_demo_known_answers(tmp_path):
    """Both demo models on all 31 instances (a few CPU minutes): OLR exact, Shapley-DCLR
    high where the leaked outcome claim decides, low where it is ignored."""
    truth = pd.read_csv(DEMO / "truth_instances.csv").set_index("instance_id")
    dclr = {}
    for model in ("leaky", "prudent"):
        t = _score(_study(tmp_path, model))
        inst = t["instance_leakage"]
        planted = inst[(inst["agent"] == "planted") & (inst["status"] == "ok")].set_index("instance_id")
        assert len(planted) == 29
        assert (planted["olr"] == truth.loc[planted.index, "expected_olr"]).all()
        assert planted["efficiency_gap"].abs().max() < 1e-9
        assert planted.loc["c29", "shapley_method"] == "monte_carlo"
        dclr[model] = planted["shapley_dclr"].astype(float).mean()
        ts = inst[inst["agent"] == "timespec"]
        assert len(ts) == 31 and (ts["olr"].dropna() == 0).all()
    assert dclr["leaky"] > 0.4 and dclr["prudent"] < 0.15 and dclr["leaky"] > dclr["prudent"] + 0.3


def test_value_job_rerun_asks_nothing(scored, tmp_path, monkeypatch, capsys):
    from llm_jobs import run_all

    study, _ = scored["leaky"]
    log = tmp_path / "q.log"
    monkeypatch.setenv("LOOKAHEAD_QUERY_LOG", str(log))
    assert run_all.main(["--only", "claims_value", "--study", str(study), "--yes"]) == 0
    assert "to query: 0" in capsys.readouterr().out
    assert not log.exists() or log.read_text() == ""


@pytest.mark.slow  # a killed subprocess and a resume (~20 s); extraction's kill test stays in the default suite
def test_kill9_mid_run_then_resume_without_requery(tmp_path):
    preds = pd.read_csv(DEMO / "predictions_leaky.csv", dtype=str, keep_default_na=False)
    preds[preds["instance_id"].isin(["c29", "c01"])].to_csv(tmp_path / "p.csv", index=False)  # c29: ~1000 coalitions
    study = _study(tmp_path, "leaky", batch_size=2, claims_predictions_path=str(tmp_path / "p.csv"))
    raw = tmp_path / "raw_leaky" / "claims_value.jsonl"
    log1, log2 = tmp_path / "q1.log", tmp_path / "q2.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "LOOKAHEAD_QUERY_LOG": str(log1)}
    code = kill_once_written(
        [PY, "-m", "llm_jobs.run_all", "--only", "claims_value", "--study", str(study), "--yes"], raw, 20, env, 300
    )
    assert code == -signal.SIGKILL
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


@pytest.mark.slow
def test_dbt_claim_models(scored, tmp_path):
    """The claim models of a build read the claim jobs' raw lines through the claim
    staging models (sources claims_raw): their five tables equal those the package
    computes from the raw files (lookahead.claims.tables.build, the jobs' reader), numbers
    to 1e-12 (scripts/claims_equivalence.py compares the same way on every claim demo).
    A line whose fields disagree with its key, appended beside the line it copies, is
    staged as not matching and named in claims_rejects, and changes no number."""
    from dbt_runner import run_dbt

    study, from_files = scored["leaky"]
    vars_ = yaml.safe_load(study.read_text())
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in Path(vars_["claims_raw_dir"]).glob("*.jsonl"):
        (raw / f.name).write_bytes(f.read_bytes())
    forged = _lines(raw / "claims_value.jsonl")[0]
    forged["query_text"] += " (edited)"  # no longer the query its key hashes
    with open(raw / "claims_value.jsonl", "a") as fh:
        fh.write(json.dumps(forged) + "\n")
    vars_["claims_raw_dir"] = str(raw)
    res = run_dbt(["build", "--select", "+tag:claims"], vars_, tmp_path / "c.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    staged = res.table("stg_claim_values")
    assert (~staged["fields_match"]).sum() == 1 and staged.loc[~staged["fields_match"], "key"].item() == forged["key"]
    rejects = res.table("claims_rejects")
    assert rejects["source"].eq("claim raw lines").sum() == 1
    sys.path.insert(0, str(ROOT / "scripts"))
    from claims_equivalence import differences

    from lookahead.claims.dbt_entry import typed

    for name, want in from_files.items():
        got = res.table(name)
        if name == "claims_rejects":
            got = got[got["source"] != "claim raw lines"].reset_index(drop=True)
        assert differences(name, typed(want), got) == [], name
    claims = res.table("claims")
    for col in ("instance_id", "claim_id", "claim_text", "category", "temporal_reference", "tau", "leakage_state", "shapley"):
        assert col in claims.columns
    inst = res.table("instance_leakage")
    for col in (
        "instance_id",
        "agent",
        "n_claims",
        "olr",
        "shapley_dclr",
        "shapley_dclr_unverifiable_leaked",
        "top1_leakage",
        "top3_leakage",
        "v_all",
        "v_empty",
        "shapley_sum",
    ):
        assert col in inst.columns
    assert set(inst["agent"]) == {"planted", "timespec"}
    assert set(res.table("claims_summary")["agent"]) == {"planted", "timespec"}
    assert len(res.table("claims_rejects")) >= 2  # the empty rationale and the rationale without claims


def _kill_then_resume(
    tmp_path: Path, job: str, study: Path, raw: Path, min_lines: int, extra: tuple[str, ...] = ()
) -> tuple[set[str], list[str]]:
    """Start ``job``, kill -9 it once ``raw`` holds ``min_lines`` answers, rerun it to the
    end; return (keys answered before the kill, keys in the file after the rerun) and
    check that the rerun sent none of the answered keys to the model again."""
    log1, log2 = tmp_path / f"{job}.q1.log", tmp_path / f"{job}.q2.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "LOOKAHEAD_QUERY_LOG": str(log1)}
    code = kill_once_written(
        [PY, "-m", "llm_jobs.run_all", "--only", job, "--study", str(study), "--yes", *extra], raw, min_lines, env, 600
    )
    assert code == -signal.SIGKILL, "job finished before the kill"
    done = {r["key"] for r in _lines(raw)}
    e = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "LOOKAHEAD_QUERY_LOG": str(log2)}
    res = subprocess.run(
        [PY, "-m", "llm_jobs.run_all", "--only", job, "--study", str(study), "--yes", *extra],
        cwd=ROOT,
        env=e,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    keys = [r["key"] for r in _lines(raw)]
    assert len(keys) == len(set(keys))  # nothing answered twice
    assert min_lines <= len(done) < len(keys)
    assert not set(log2.read_text().split()) & done  # the rerun asked only what was missing
    return done, keys


@pytest.mark.slow  # one killed subprocess and a resume per job
def test_kill9_support_job_resumes_without_requery(tmp_path):
    """claims_support with the model as judge (the demo's leaky model answers every
    yes/no prompt): the judgments of the BM25 candidates survive kill -9."""
    study = _study(tmp_path, "leaky", batch_size=2, claims_support_judge="llm")
    _kill_then_resume(tmp_path, "claims_support", study, tmp_path / "raw_leaky" / "claims_support.jsonl", 10)
    t = build(load_study(study))
    assert "candidate(s) not judged yet" not in " ".join(t["claims_rejects"]["reason"])


@pytest.mark.slow
def test_kill9_rationale_job_resumes_without_requery(tmp_path):
    """claims_rationale (Temporal Hint agent) writing rationales for the demo instances."""
    study = _study(tmp_path, "leaky", batch_size=1, claims_rationale_max_tokens=8, claims_predictions_path=None)
    _kill_then_resume(tmp_path, "claims_rationale (temporal_hint)", study, tmp_path / "raw_leaky" / "claims_rationale.jsonl", 5)


@pytest.mark.slow
def test_kill9_timespec_job_resumes_without_requery(tmp_path):
    """claims_timespec's phases (supervisor checks, regeneration, aggregator)."""
    study = _study(tmp_path, "leaky", batch_size=1)
    _, _keys = _kill_then_resume(tmp_path, "claims_timespec", study, tmp_path / "raw_leaky" / "claims_timespec.jsonl", 5)
    finals = [r for r in _lines(tmp_path / "raw_leaky" / "claims_timespec.jsonl") if r.get("final")]
    assert len({r["instance_id"] for r in finals}) == 31
