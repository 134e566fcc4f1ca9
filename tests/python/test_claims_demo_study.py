"""The demo's claim tables live beside its verdict: demo/claims/demo_{contaminated,clean}.yml
extend the protocol demo studies (``extends:``) with a claim model (claims_model_id/path), so one
`dbt build` puts `claims` and `instance_leakage` into outputs/<study_name>.duckdb.

Default suite: the study files are the protocol studies plus claim settings only (so
the verdict is the protocol study's), the claim model replaces the protocol model for the
claim jobs and tables and nowhere else, the dbt claim models read the study the build resolved,
and the tables built from the demo study carry the issue's columns. Slow tier: the
whole `lookahead run` of the contaminated demo study (verdict, claim tables, report)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lookahead.claims import demo
from lookahead.claims.dbt_entry import table
from lookahead.claims.inputs import claim_study
from lookahead.config import load_study, read_study_file

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "claims"

# The issue's columns (issue 10, Deliver 6), exactly as named there.
CLAIMS_COLUMNS = ("instance_id", "claim_id", "claim_text", "category", "temporal_reference", "tau", "leakage_state", "shapley")
INSTANCE_COLUMNS = (
    "instance_id",
    "agent",
    "n_claims",
    "olr",
    "shapley_dclr",
    "shapley_dclr_unverifiable_leaked",
    "top1_leakage",
    "top3_leakage",
    "top5_leakage",
    "shapley_dclr_se",
    "shapley_dclr_ci_low",
    "shapley_dclr_ci_high",
    "v_all",
    "v_empty",
    "shapley_sum",
)


@pytest.mark.parametrize("model, scen", sorted(demo.PROTOCOL_STUDY.items()))
def test_demo_study_is_the_protocol_study_plus_claim_settings(model, scen):
    shipped = yaml.safe_load((DEMO / f"demo_{scen}.yml").read_text())
    assert shipped == demo.protocol_study_vars(DEMO, model)  # the file is what the code writes
    assert shipped["extends"] == f"demo/studies/{scen}.yml"  # builds on the protocol study
    # beside the claim settings only lap_measures and the reference model its reference-model
    # LAP needs, which add the robustness table and leave the verdict (it reads lap_measure)
    # as the protocol study gives it
    measure_settings = {"extends", "study_name", "lap_measures", "reference_model_id", "reference_model_path"}
    assert all(k.startswith("claims_") for k in set(shipped) - measure_settings)
    protocol = yaml.safe_load((ROOT / "demo" / "studies" / f"{scen}.yml").read_text())
    flat = read_study_file(DEMO / f"demo_{scen}.yml")  # what dbt and the jobs see
    assert {k: flat[k] for k in protocol if k != "study_name"} == {
        k: v for k, v in protocol.items() if k != "study_name"
    }  # nothing of the protocol changed
    assert set(flat) == (set(protocol) | set(shipped)) - {"extends"}
    a, b = load_study(DEMO / f"demo_{scen}.yml"), load_study(ROOT / "demo" / "studies" / f"{scen}.yml")
    # a name of its own: the protocol study (the default study, for contaminated) never
    # builds into the claim study's database
    assert (a.name, b.name) == (f"demo_{scen}", f"demo_{scen}_protocol")
    assert a.backend.model_id == b.backend.model_id  # the verdict's model is unchanged


def test_claim_model_replaces_the_protocol_model_for_claims_only():
    study = load_study(DEMO / "demo_contaminated.yml")
    swapped = claim_study(study)
    assert study.backend.model_id == "demo-contaminated"
    assert swapped.backend.model_id == "demo-claims-leaky"
    assert swapped.resolve(swapped.backend.model_path) == ROOT / "demo" / "claims" / "models" / "leaky"
    assert claim_study(swapped).vars == swapped.vars  # idempotent
    plain = load_study(ROOT / "demo" / "studies" / "contaminated.yml")
    assert claim_study(plain) is plain  # no claim model: nothing changes
    from llm_jobs.claims_common import make_claim_context

    class Args:
        study = str(DEMO / "demo_contaminated.yml")
        yes = True

    ctx = make_claim_context(Args())
    assert ctx.study.backend.model_id == "demo-claims-leaky"  # the jobs query the claim model


def test_the_dbt_claim_models_read_the_study_the_build_resolved():
    """Every claim model builds from `study_settings` (the settings the build resolved,
    defaults included) and the claim staging models or the claim steps before it (the
    frames its stage reads: lookahead.claims.dbt_entry.STAGES; the staged lines by the
    models of lookahead.claims.tables.STAGED_LINES), and the claim models' YAML passes no
    vars of its own: there is no second list of claim settings that could miss one or
    fall back to the default study."""
    from lookahead.claims.dbt_entry import STAGES
    from lookahead.claims.tables import STAGED_LINES

    for name, stage in STAGES.items():
        (path,) = (ROOT / "python_models").glob(f"*/claims/{name}.py")
        text = path.read_text()
        assert f'"{name}",\n        dbt.ref("study_settings").df(),' in text, name
        for field, staging in STAGED_LINES.items():
            assert (f'{field}=dbt.ref("{staging}")' in text) == (field in stage.reads), (name, staging)
    for folder in ("python_models", "models"):  # the Python tables, their contracted views, the steps
        for layer in ("intermediate", "marts"):
            assert "var(" not in (ROOT / folder / layer / "claims" / "_claims__models.yml").read_text()


def _settings_row(study) -> pd.DataFrame:
    return pd.DataFrame({"settings_json": [study.settings_json()]})


def test_demo_study_builds_the_issue_columns(tmp_path):
    """The tables the dbt claim models return for the demo study (values not computed
    here: every scored instance is 'values pending', the columns are the same)."""
    study = load_study(DEMO / "demo_contaminated.yml", overrides={"claims_raw_dir": str(tmp_path / "raw")})
    claims = table("claims", _settings_row(study))
    inst = table("instance_leakage", _settings_row(study))
    assert set(CLAIMS_COLUMNS) <= set(claims.columns), sorted(set(CLAIMS_COLUMNS) - set(claims.columns))
    assert set(INSTANCE_COLUMNS) <= set(inst.columns), sorted(set(INSTANCE_COLUMNS) - set(inst.columns))
    truth = pd.read_csv(DEMO / "truth_claims.csv")
    planted = claims[claims["agent"] == demo.AGENT]
    assert len(planted) == len(truth)  # every planted claim, one row each
    assert set(inst["status"]) == {"values pending", "empty rationale", "no claims"}


def test_the_claim_inputs_are_read_once_per_build(tmp_path, monkeypatch):
    """The claim models of one build read the predictions and the corpus once, shared
    by the stages that need them (lookahead.claims.dbt_entry); a changed claim input
    reads them again."""
    from lookahead.claims import dbt_entry

    calls = []
    real = dbt_entry.load_corpus
    monkeypatch.setattr(dbt_entry, "load_corpus", lambda st: calls.append(1) or real(st))
    raw = tmp_path / "raw"
    study = load_study(DEMO / "demo_contaminated.yml", overrides={"claims_raw_dir": str(raw)})
    settings = _settings_row(study)
    frames = {field: pd.DataFrame(columns=["fields_match"]) for field in ("extractions", "agents")}
    instances = dbt_entry.stage("int_claim_instances", settings, **frames)
    dbt_entry.stage("int_claims_dated", settings, instances=instances, support=pd.DataFrame(columns=["fields_match"]))
    dbt_entry.stage("int_claims_dated", settings, instances=instances, support=pd.DataFrame(columns=["fields_match"]))
    assert len(calls) == 1
    raw.mkdir(exist_ok=True)
    (raw / "claims_value.jsonl").write_text("")  # a claim job's file appears: read again
    dbt_entry.stage("int_claims_dated", settings, instances=instances, support=pd.DataFrame(columns=["fields_match"]))
    assert len(calls) == 2


@pytest.mark.slow
def test_lookahead_run_puts_claims_beside_the_verdict(tmp_path):
    """`make demo`'s step for the contaminated study, into a scratch database: the same
    verdict as the protocol study, the claim tables with the issue's columns and the
    planted OLR, and the report's claim section with its figure."""
    from dbt_runner import dbt_env

    v = yaml.safe_load((DEMO / "demo_contaminated.yml").read_text())
    v.update(
        raw_dir=str(tmp_path / "raw"),
        claims_raw_dir=str(tmp_path / "claims_raw"),
        results_dir=str(tmp_path / "results"),
        outputs_dir=str(tmp_path / "outputs"),
    )
    study = tmp_path / "study.yml"
    study.write_text(yaml.safe_dump(v))
    db = tmp_path / "db.duckdb"
    env = dbt_env(db)
    for job in ("claims_timespec", "claims_value"):
        r = subprocess.run(
            [sys.executable, "-m", "llm_jobs.run_all", "--only", job, "--study", str(study), "--yes"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lookahead = Path(sys.executable).with_name("lookahead")
    r = subprocess.run(
        [str(lookahead), "run", "--study", str(study), "--yes"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        verdict = con.sql("select verdict from verdict").fetchone()[0]
        claims = con.sql("select * from claims").df()
        inst = con.sql("select * from instance_leakage").df()
    finally:
        con.close()
    assert verdict == "Contamination detected"
    assert set(CLAIMS_COLUMNS) <= set(claims.columns) and set(INSTANCE_COLUMNS) <= set(inst.columns)
    truth = pd.read_csv(DEMO / "truth_instances.csv").set_index("instance_id")
    ok = inst[(inst["agent"] == demo.AGENT) & (inst["status"] == "ok")].set_index("instance_id")
    assert len(ok) == 29 and (ok["olr"].astype(float) == truth.loc[ok.index, "expected_olr"].astype(float)).all()
    report = (tmp_path / "results" / "REPORT.md").read_text()
    assert "**Verdict: Contamination detected.**" in report
    assert "## Claim-level leakage" in report and (tmp_path / "results" / "figures" / "claims_shapley.png").exists()


def test_extends_merges_and_refuses_loops(tmp_path):
    """A study file builds on another: the base's settings, then its own; a loop or a
    missing base is one line naming the file."""
    from lookahead.config import StudyConfigError

    base = tmp_path / "base.yml"
    base.write_text("study_name: b\nbatch_size: 4\nclaims_bm25_k: 2\n")
    child = tmp_path / "child.yml"
    child.write_text(f"extends: {base}\nclaims_bm25_k: 7\n")
    grand = tmp_path / "grand.yml"
    grand.write_text(f"extends: {child}\nstudy_name: g\n")
    assert read_study_file(grand) == {"study_name": "g", "batch_size": 4, "claims_bm25_k": 7}
    base.write_text(f"extends: {grand}\n")
    with pytest.raises(StudyConfigError, match="loops back"):
        read_study_file(grand)
    child.write_text(f"extends: {tmp_path / 'nope.yml'}\n")
    with pytest.raises(StudyConfigError, match="does not exist"):
        read_study_file(child)


def test_lookahead_run_runs_the_claim_jobs_in_order():
    """`lookahead jobs` / `run` run the registry's entries a study needs (llm_jobs.registry):
    the protocol's, then the agent jobs, extraction, support (llm judge only), coalition
    values and the re-prediction check; no claim job for a study without claim settings,
    and no protocol job for a claim-only one. An agent name the registry lacks is one line."""
    from llm_jobs.registry import study_jobs
    from lookahead.config import StudyConfigError

    protocol = ["forecast+mink", "forecast", "recall", "mink", "reference"]
    names = [e.name for e in study_jobs(load_study(DEMO / "demo_contaminated.yml"))]
    assert names == [
        *protocol,
        "claims_timespec",
        "claims_extract",
        "claims_value",
        "claims_repredict",
    ]  # support judge 'contains': no support job
    assert [e.name for e in study_jobs(load_study(ROOT / "demo" / "studies" / "contaminated.yml"))] == protocol
    s = load_study(
        DEMO / "demo_contaminated.yml",
        overrides={"claims_support_judge": "llm", "claims_agent_jobs": ["timespec", "temporal_hint"]},
    )
    assert [e.name for e in study_jobs(s)][len(protocol) :][:4] == [
        "claims_rationale (temporal_hint)",  # the registry's order: TimeSPEC reads the other agents'
        "claims_timespec",
        "claims_extract",
        "claims_support",
    ]
    claim_only = [e.name for e in study_jobs(load_study(DEMO / "regression" / "leaky.yml"))]
    assert claim_only and not set(claim_only) & set(protocol)
    with pytest.raises(StudyConfigError, match="'claims_agent_jobs': 'oracle' is not one of superforecasting"):
        study_jobs(load_study(DEMO / "demo_contaminated.yml", overrides={"claims_agent_jobs": ["oracle"]}))


@pytest.mark.parametrize("model", ["leaky", "prudent"])
def test_shipped_classification_models_state_their_rules_probability(model):
    """Each shipped classification claim model, asked every coalition of the first four
    demo instances that the studies score, states its rule's P(up) (1, 0, or 0.5 for equal
    odds) on every one: the planted truth the claim check compares against (over all 17
    instances 1,660 of 1,660, benchmarks/results/claims_rule_following_seed.json)."""
    from lookahead.backends.transformers_backend import TransformersBackend
    from lookahead.claims import demo as cdemo

    backend = TransformersBackend(
        f"demo-claims-{model}", model_path=str(ROOT / "demo" / "claims" / "models" / model), use_chat_template=False
    )
    got = cdemo.rule_following(model, backend, cdemo.demo_instances()[:4])
    assert got["coalitions"] > 50 and got["unparsed_answers"] == 0
    assert got["following"] == got["coalitions"], got
