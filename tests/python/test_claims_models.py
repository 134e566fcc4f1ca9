"""The claim pipeline as dbt models (docs/claims.md, "How a build computes the claim
tables"): staged lines -> int_claim_instances -> int_claims_dated ->
int_claim_coalition_answers (SQL) -> int_claim_shapley -> the five marts.

Checked against the tables the package computes from the raw files in one go
(lookahead.claims.tables.build, the jobs' reader), on the demo's planted instances with
the coalition values of the ideal leaky model, whose Shapley values are known in closed
form (test_claims_tables.py): the stages run through DuckDB give the same numbers, an
edited raw line changes them on the next build, and a raw folder whose name holds
quotes and glob characters is read as the folder it names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from dbt_runner import ROOT, run_dbt
from test_claims_tables import _study, _write_ideal_values, demo_dir  # noqa: F401 (a fixture)

from lookahead.claims import dbt_entry
from lookahead.claims import tables as t
from lookahead.claims.inputs import ClaimsResolved, claim_study
from lookahead.keys import fields_key

sys.path.insert(0, str(ROOT / "scripts"))
from claims_equivalence import TABLE_KEYS, differences

#: a claim raw folder name a SQL string or a glob would break on
HOSTILE = "raw 'q *[x]{a,b}; drop table claims; --"


def _keyed_values(study, raw: Path) -> None:
    """The ideal leaky model's coalition answers as claims_value lines whose own fields
    hash to their key, as the value job writes them (so staging keeps them)."""
    _write_ideal_values(study, raw)
    path = raw / "claims_value.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for rec in lines:
        rec.update(
            task="claims_value",
            row_id=f"{rec['instance_id']}|{rec['agent']}|{rec['claims_sha256']}|{rec['mask']}",
            query_text=f"coalition {rec['mask']} of {rec['instance_id']}",
            params={"phase": "value"},
        )
        rec["key"] = fields_key(rec)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def _through_duckdb(df: pd.DataFrame) -> pd.DataFrame:
    """A stage's table as the next model reads it: written to DuckDB, read back."""
    con = duckdb.connect()
    try:
        con.register("stage", df)
        return con.sql("select * from stage").df()
    finally:
        con.close()


def test_the_stages_through_duckdb_give_the_tables_of_one_build(demo_dir, tmp_path):
    """Each stage typed as its model writes it and read back from DuckDB, as dbt hands it
    to the next: the five tables equal build()'s (numbers to 1e-12), and the planted
    truth holds (exact Shapley-DCLR of the ideal leaky game)."""
    raw = tmp_path / "raw"
    study = _study(demo_dir, raw)
    _write_ideal_values(study, raw)
    want = t.build(study)
    study = claim_study(study)
    st = ClaimsResolved.from_study(study)
    lines = t.ClaimLines.from_files(study)
    preds, corpus, rejects = t.read_inputs(study, st, lines)
    db = lambda df: _through_duckdb(dbt_entry.typed(df))
    instances = db(t.extract_stage(study, st, preds, lines)).sort_values("instance_order")
    dated = db(t.date_stage(st, instances, corpus, lines.support))
    values = db(t.shapley_stage(st, instances, lines.values))
    inst = db(t.leakage_stage(st, instances, dated, values))
    repred = db(t.repredict_table(study, st, instances, lines))
    got = {
        "claims": t.claims_stage(dated.sort_values(["instance_order", "claim_id"]), values),
        "instance_leakage": inst,
        "claims_summary": t.summarize(pd.DataFrame(t.stage_records(inst), columns=t.INSTANCE_COLUMNS), st, repred),
        "claims_repredict": repred,
        "claims_rejects": t.rejects_stage(rejects, instances, dated, inst),
    }
    for name in TABLE_KEYS:
        assert list(got[name].columns) == list(want[name].columns), name
        assert not differences(name, dbt_entry.typed(want[name]), dbt_entry.typed(got[name])), name
    assert (values["values_status"] == "ok").sum() == 29 and set(values["shapley_method"].dropna()) == {
        "exact",
        "monte_carlo",
        "none",
    }
    truth = pd.read_csv(demo_dir / "truth_instances.csv").set_index("instance_id")
    exact = inst[(inst["status"] == "ok") & (inst["shapley_method"] == "exact")].set_index("instance_id")
    ideal = truth.loc[exact.index, "ideal_dclr_leaky"]
    both = ideal.notna()
    assert both.sum() > 20
    assert (exact.loc[both, "shapley_dclr"].astype(float) - ideal[both]).abs().max() < 1e-12


def test_every_claim_model_hands_its_stage_what_it_reads():
    """Each claim model's file passes exactly the frames its stage reads
    (lookahead.claims.dbt_entry.STAGES), by dbt.ref, and nothing else computes a claim table."""
    import re

    files = sorted((ROOT / "python_models").glob("*/claims/*.py"))
    assert {f.stem for f in files} == set(dbt_entry.STAGES)
    for f in files:
        text = f.read_text()
        assert f'stage(\n        "{f.stem}",\n        dbt.ref("study_settings").df(),' in text, f
        handed = dict(re.findall(r"(\w+)=dbt\.ref\(\"(\w+)\"\)", text))
        assert set(handed) == set(dbt_entry.STAGES[f.stem].reads), f
        for field, staging in t.STAGED_LINES.items():
            if field in handed:
                assert handed[field] == staging, f
    with pytest.raises(ValueError, match="reads"):
        dbt_entry.stage("int_claims_dated", pd.DataFrame(), instances=pd.DataFrame())


def _vars(demo_dir: Path, raw: Path) -> dict:
    """The planted leaky study's settings as test_claims_tables._study gives them."""
    from lookahead.claims import demo

    v = demo.study_vars(demo_dir, "leaky")  # extends the default study, as load_study(None) does
    v.update(
        {
            "claims_raw_dir": str(raw),
            "claims_predictions_path": str(demo_dir / "predictions_leaky.csv"),
            "claims_corpus_path": str(demo_dir / "corpus.csv"),
            "claims_extractions_path": str(demo_dir / "extractions.jsonl"),
        }
    )
    return v


@pytest.fixture(scope="module")
def hostile_build(demo_dir, tmp_path_factory):
    """The planted demo built by dbt (+tag:claims) from a claim raw folder outside the
    project whose name holds a quote, a comment, `;` and glob characters."""
    tmp = tmp_path_factory.mktemp("claims_models")
    raw = tmp / HOSTILE
    study = _study(demo_dir, raw)
    _keyed_values(study, raw)
    vars_ = _vars(demo_dir, raw)
    db = tmp / "claims.duckdb"
    res = run_dbt(["build", "--select", "+tag:claims"], vars_, db)
    assert res.returncode == 0, res.output[-4000:]
    return study, raw, vars_, db, res


def test_a_claim_raw_folder_with_a_double_quote_is_refused_in_one_line(demo_dir, tmp_path):
    """A double quote (or a backslash) in claims_raw_dir is refused by the settings loader
    in one line naming the setting, before any SQL or job sees it."""
    from lookahead.config import StudyConfigError, load_study

    for bad in ('raw"; drop table claims; --', "raw\\x"):
        v = _vars(demo_dir, tmp_path / bad)
        v.pop("extends")
        with pytest.raises(StudyConfigError) as err:
            load_study(None, overrides=v)
        assert "claims_raw_dir" in str(err.value) and "\n" not in str(err.value)


def _marts(res) -> dict[str, pd.DataFrame]:
    return {name: res.table(name) for name in TABLE_KEYS}


@pytest.mark.slow  # two dbt builds of the claim models (about a minute)
def test_a_build_of_the_claim_models_equals_the_one_computation(hostile_build):
    """dbt's claim models give build()'s five tables, each intermediate step holds a row
    per instance, claim or coalition, and the raw folder's hostile name was read as the
    folder it names (its lines scored every instance), never pasted into SQL."""
    study, raw, _, db, res = hostile_build
    want = t.build(study)
    got = _marts(res)
    for name in TABLE_KEYS:
        assert not differences(name, dbt_entry.typed(want[name]), got[name]), name
    assert len(res.table("int_claim_instances")) == len(want["instance_leakage"]) == 31
    assert len(res.table("int_claims_dated")) == len(want["claims"])
    shap = res.table("int_claim_shapley")
    assert (shap["values_status"] == "ok").sum() == 29
    answers = res.table("int_claim_coalition_answers")
    assert len(answers) == sum(1 for _ in open(raw / "claims_value.jsonl"))
    # the folder reaches SQL as a bound variable (the plugin's lookahead_study.claims_raw_dir);
    # its one appearance in SQL text is inside study_settings' settings JSON, escaped
    for sql in (db.parent / "target" / "compiled").rglob("*.sql"):
        text = sql.read_text()
        if sql.stem == "study_settings":
            assert str(raw).replace("'", "''") in text and "raw 'q" not in text
        else:
            assert "drop table claims" not in text, sql


@pytest.mark.slow  # two dbt builds of the claim models (about a minute)
def test_a_second_build_after_an_edited_raw_line_computes_again(hostile_build):
    """One coalition answer edited in the raw file (the full coalition of an exact
    instance, its key unchanged): the next build's v(N), Shapley values and Shapley-DCLR
    of that instance change to what the package computes from the edited file, and no
    other instance's."""
    study, raw, vars_, db, res = hostile_build
    before = res.table("instance_leakage").set_index(["instance_id", "agent"])
    path = raw / "claims_value.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    inst = before[(before["shapley_method"] == "exact") & (before["n_claims"] >= 2)].index[0]
    full = max(r["mask"] for r in lines if (r["instance_id"], r["agent"]) == inst)
    edited = next(r for r in lines if (r["instance_id"], r["agent"]) == inst and r["mask"] == full)
    edited["label_probs"] = {k: (0.01 if v > 0.5 else 0.99) for k, v in edited["label_probs"].items()}
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    res2 = run_dbt(["build", "--select", "+tag:claims"], vars_, db)
    assert res2.returncode == 0, res2.output[-4000:]
    after = res2.table("instance_leakage").set_index(["instance_id", "agent"])
    assert after.loc[inst, "v_all"] != pytest.approx(before.loc[inst, "v_all"], abs=1e-6)
    changed = (after["v_all"].astype(float) - before["v_all"].astype(float)).abs() > 1e-12
    assert list(after.index[changed.fillna(False)]) == [inst]
    want = t.build(study)
    for name in TABLE_KEYS:
        assert not differences(name, dbt_entry.typed(want[name]), res2.table(name)), name
