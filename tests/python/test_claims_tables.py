"""The claim tables on the demo's planted truth, without a model: BM25 against an
independent implementation, input rejects, and the whole deterministic path (dating,
Shapley, metrics) fed with coalition values of the ideal rule models, whose Shapley
values are known in closed form."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lookahead.claims import demo
from lookahead.claims.inputs import ClaimsResolved, load_predictions
from lookahead.claims.retrieval import STOPWORDS, bm25
from lookahead.claims.shapley import members_of, plan_for
from lookahead.claims.tables import build, claims_sha, instance_agent_id
from lookahead.config import StudyConfigError, load_study

# ----------------------------------------------------------------------------- BM25


def _bm25_reference(queries, docs, k1=1.2, b=0.75):
    """Okapi BM25 written from the formula (Robertson; Lucene idf), in plain Python."""
    tok = lambda t: [w for w in re.split(r"[^a-z0-9]+", t.lower()) if w and w not in STOPWORDS]
    dtoks = {d: tok(t) for d, t in docs.items()}
    N = len(docs)
    avgdl = sum(len(t) for t in dtoks.values()) / N
    df = Counter(w for t in dtoks.values() for w in set(t))
    out = {}
    for q, text in queries.items():
        scores = {}
        for d, t in dtoks.items():
            tf = Counter(t)
            s = sum(
                math.log(1 + (N - df[w] + 0.5) / (df[w] + 0.5)) * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(t) / avgdl))
                for w in set(tok(text))
                if w in tf
            )
            if s > 0:
                scores[d] = s
        out[q] = scores
    return out


def test_bm25_matches_independent_formula_and_date_filter():
    rng = np.random.default_rng(3)
    vocab = [
        "acme",
        "factory",
        "revenue",
        "plant",
        "opened",
        "shut",
        "million",
        "stock",
        "higher",
        "ceo",
        "report",
        "analyst",
        "north",
        "south",
        "the",
        "of",
    ]
    docs = {f"d{i:02d}": " ".join(rng.choice(vocab, size=rng.integers(3, 15))) for i in range(30)}
    corpus = pd.DataFrame(
        {
            "doc_id": list(docs),
            "published_at": [f"2021-01-{i + 1:02d}" for i in range(30)],
            "title": "",
            "body": list(docs.values()),
        }
    )
    queries = {"q1": "acme opened a factory", "q2": "revenue million report", "q3": "nothing matches zzz"}
    got = bm25(pd.DataFrame({"query_id": list(queries), "query_text": list(queries.values())}), corpus, 30)
    ref = _bm25_reference(queries, {d: " " + t for d, t in docs.items()})
    for q in queries:
        g = got[got["query_id"] == q].set_index("doc_id")["score"].to_dict()
        assert set(g) == set(ref[q])
        for d, s in ref[q].items():
            assert g[d] == pytest.approx(s, rel=1e-12)
    assert got[got["query_id"] == "q3"].empty
    top = bm25(pd.DataFrame({"query_id": ["q1"], "query_text": [queries["q1"]], "before": ["2021-01-10"]}), corpus, 3)
    assert len(top) <= 3 and (pd.to_datetime(top["published_at"]) < "2021-01-10").all()
    assert list(top["rank"]) == list(range(1, len(top) + 1))


# ----------------------------------------------------------------------------- the demo truth


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("claims_demo")
    demo.build(out, train=False)
    insts = demo.demo_instances()
    rows = []
    for i in insts:
        pred, _ = demo.ideal_shapley("leaky", i)
        rows.append(
            {
                "instance_id": i.instance_id,
                "agent": demo.AGENT,
                "entity": i.firm,
                "task": demo.TASK,
                "t_ref": i.t_ref.isoformat(),
                "task_input": i.task_input,
                "prediction": pred or "up",
                "probability": 0.8 if (pred or "up") == "up" else 0.2,
                "rationale": demo.rationale_text(i),
                "outcome": i.outcome,
            }
        )
    pd.DataFrame(rows).to_csv(out / "predictions_leaky.csv", index=False)
    return out


def _study(demo_dir: Path, raw: Path, **kw):
    v = demo.study_vars(demo_dir, "leaky")
    assert v.pop("extends") == "demo/studies/contaminated.yml"  # the default study, load_study's base
    v.update(
        {
            "claims_raw_dir": str(raw),
            "claims_predictions_path": str(demo_dir / "predictions_leaky.csv"),
            "claims_corpus_path": str(demo_dir / "corpus.csv"),
            "claims_extractions_path": str(demo_dir / "extractions.jsonl"),
            **kw,
        }
    )
    return load_study(None, overrides=v)


def _write_ideal_values(study, raw: Path) -> None:
    """claims_value lines as the value job writes them, with v(S) of the ideal leaky model."""
    st = ClaimsResolved.from_study(study)
    preds, _ = load_predictions(study, st)
    by_id = {i.instance_id: i for i in demo.demo_instances()}
    raw.mkdir(parents=True, exist_ok=True)
    with open(raw / "claims_value.jsonl", "w") as fh:
        for r in preds.to_dict("records"):
            inst = by_id[r["instance_id"]]
            if r["instance_id"] == "c30":
                continue
            n = len(inst.claims)
            from lookahead.claims.schema import Claim

            cl = [Claim(k + 1, c.text, c.text, c.temporal_reference, c.category, "") for k, c in enumerate(inst.claims)]
            key = instance_agent_id(r["instance_id"], r["agent"])
            plan = plan_for(n, key, st.claims.claims_exact_max, st.claims.claims_mc_permutations, st.claims.claims_shapley_seed)
            for m in plan.masks:
                coal = [inst.claims[i] for i in members_of(m, n)]
                probs = {lab: demo.ideal_value("leaky", coal, lab) for lab in demo.LABELS}
                fh.write(
                    json.dumps(
                        {
                            "key": f"{r['instance_id']}-{m}",
                            "model_id": study.backend.model_id,
                            "instance_id": r["instance_id"],
                            "agent": r["agent"],
                            "claims_sha256": claims_sha(cl),
                            "mask": m,
                            "task_kind": "classification",
                            "params": {
                                "coalition_prompt": st.claims.claims_coalition_prompt,
                                "coalition_value": st.claims.claims_coalition_value,
                            },
                            "label_probs": probs,
                        }
                    )
                    + "\n"
                )


def test_planted_truth_exact(demo_dir, tmp_path):
    raw = tmp_path / "raw"
    study = _study(demo_dir, raw)
    _write_ideal_values(study, raw)
    t = build(study)
    claims, inst = t["claims"], t["instance_leakage"].set_index("instance_id")
    truth_c = pd.read_csv(demo_dir / "truth_claims.csv")
    m = claims.merge(truth_c, on=["instance_id", "claim_id"], suffixes=("", "_truth"))
    assert len(m) == len(truth_c) == len(claims)
    assert (m["claim_text"] == m["claim_text_truth"]).all()
    assert (m["leakage_state"] == m["expected_state"]).all()
    truth_i = pd.read_csv(demo_dir / "truth_instances.csv").set_index("instance_id")
    ok = inst[inst["status"] == "ok"]
    assert len(ok) == 29
    for iid, r in ok.iterrows():
        assert r["olr"] == truth_i.loc[iid, "expected_olr"]  # exact
        assert r["olr_unverifiable_leaked"] == truth_i.loc[iid, "expected_olr_unverifiable_leaked"]
        assert abs(r["efficiency_gap"]) < 1e-12
        ideal = truth_i.loc[iid, "ideal_dclr_leaky"]
        if r["shapley_method"] == "exact":
            if pd.isna(ideal):
                assert r["shapley_dclr"] is None
            else:
                assert r["shapley_dclr"] == pytest.approx(ideal, abs=1e-12)
    assert inst.loc["c29", "shapley_method"] == "monte_carlo" and inst.loc["c29", "n_claims"] == 12
    assert inst.loc["c30", "status"] == "empty rationale"
    assert inst.loc["c31", "status"] == "no claims"
    # every planted A4 claim carries the outcome claim's Shapley weight in the leaky game
    a4 = claims[(claims["category"] == "A4")]
    assert (a4["leakage_state"] == "leaked").all()
    summ = t["claims_summary"]
    assert list(summ["agent"]) == [demo.AGENT] and summ["n_instances"].iloc[0] == 31


def test_vague_period_start_setting(demo_dir, tmp_path):
    study = _study(demo_dir, tmp_path / "raw", claims_vague_period="start")
    claims = build(study)["claims"]
    truth_c = pd.read_csv(demo_dir / "truth_claims.csv")
    m = claims.merge(truth_c, on=["instance_id", "claim_id"])
    assert (m["leakage_state"] == m["expected_state_start"]).all()
    assert (m["expected_state"] != m["expected_state_start"]).any()  # the setting matters in the demo


def test_pending_values_and_bad_inputs(demo_dir, tmp_path):
    bad = pd.read_csv(demo_dir / "predictions_leaky.csv", dtype=str, keep_default_na=False)
    bad.loc[0, "t_ref"] = "soon"
    bad.loc[1, "prediction"] = "sideways"
    bad.loc[2, "instance_id"] = ""
    bad = pd.concat([bad, bad.iloc[[5]]])
    p = tmp_path / "bad.csv"
    bad.to_csv(p, index=False)
    corpus = pd.read_csv(demo_dir / "corpus.csv", dtype=str)
    corpus.loc[0, "published_at"] = "yesterday"
    cp = tmp_path / "corpus.csv"
    corpus.to_csv(cp, index=False)
    study = _study(demo_dir, tmp_path / "raw", claims_predictions_path=str(p), claims_corpus_path=str(cp))
    t = build(study)
    reasons = " | ".join(t["claims_rejects"]["reason"])
    assert "'soon' is not a date" in reasons
    assert "'sideways' is not one of the labels" in reasons
    assert "empty instance_id" in reasons
    assert "duplicate (instance_id, agent)" in reasons
    assert "'yesterday' is not a date" in reasons
    assert "values pending" in reasons
    assert len(t["instance_leakage"]) == 31 - 3
    assert set(t["instance_leakage"]["status"]) == {"values pending", "empty rationale", "no claims"}
    # empty corpus: A1-A3 by temporal reference alone, with the reason recorded
    empty = tmp_path / "empty.csv"
    pd.DataFrame(columns=["doc_id", "published_at", "title", "body"]).to_csv(empty, index=False)
    t = build(_study(demo_dir, tmp_path / "raw", claims_corpus_path=str(empty)))
    assert "empty or no corpus" in " ".join(t["claims_rejects"]["reason"])
    ev = t["claims"][t["claims"]["claim_text"].str.contains("factory")]
    assert (ev["leakage_state"] == "unverifiable").all()


def test_missing_column_and_bad_setting_are_one_line(demo_dir, tmp_path):
    df = pd.read_csv(demo_dir / "predictions_leaky.csv").drop(columns=["rationale"])
    p = tmp_path / "p.csv"
    df.to_csv(p, index=False)
    with pytest.raises(StudyConfigError, match="claims_predictions_path.*rationale"):
        build(_study(demo_dir, tmp_path / "raw", claims_predictions_path=str(p)))
    with pytest.raises(StudyConfigError, match="claims_vague_period"):
        build(_study(demo_dir, tmp_path / "raw", claims_vague_period="middle"))


def test_no_predictions_configured_builds_empty(tmp_path):
    study = load_study(None, overrides={"raw_dir": str(tmp_path)})
    t = build(study)
    assert all(len(df) == 0 for df in t.values())
    assert "leakage_state" in t["claims"].columns and "shapley_dclr" in t["instance_leakage"].columns


def test_unparseable_temporal_reference_is_one_reject_per_claim(demo_dir, tmp_path):
    """An extracted claim whose temporal reference is not a date form the parser knows:
    the claim is kept, dated by the corpus alone (supported: its document decides; not
    supported: unverifiable, with the reason), and one reject row names it."""
    lines = [json.loads(x) for x in (demo_dir / "extractions.jsonl").read_text().splitlines()]
    for rec in lines:
        if rec["instance_id"] == "c01":
            for c in rec["claims"]:
                if c["claim_text"].startswith("Acorvia opened a new factory"):  # has a document before t_ref
                    c["temporal_reference"] = "shortly after the spring fair"
                if "chief executive" in c["claim_text"]:  # has no document
                    c["temporal_reference"] = "around then"
    p = tmp_path / "extractions.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))
    t = build(_study(demo_dir, tmp_path / "raw", claims_extractions_path=str(p)))
    rej = t["claims_rejects"]
    bad = rej[rej["reason"].str.contains("unparseable")]
    assert len(bad) == 2 and bad["reason"].str.contains("shortly after the spring fair").sum() == 1
    c = t["claims"][t["claims"]["instance_id"] == "c01"].set_index("claim_text")
    assert c.loc["Acorvia opened a new factory on 2022-03-28.", "leakage_state"] == "not_leaked"  # by its document
    assert c.loc["Acorvia hired a new chief executive in 2022.", "leakage_state"] == "unverifiable"
    assert len(t["instance_leakage"]) == 31  # nothing dropped


def test_check_names_an_unreadable_database_in_one_line(tmp_path, capsys):
    """A database another process holds (or any file DuckDB cannot open) is one line, exit 2."""
    from lookahead.claims import check

    bad = tmp_path / "leaky.duckdb"
    bad.write_bytes(b"not a duckdb file")
    rc = check.main(["--demo", "demo/claims/ranking", "--db", f"leaky={bad}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith(f"error: database {bad} of model 'leaky' cannot be read:") and "\n" not in err


def test_timespec_final_rationale_is_read_by_its_text(demo_dir, tmp_path):
    """TimeSPEC's final lines: one as every line was written before its final rationale
    was extracted (the validated claims as claims, the rationale their text) keeps those
    claims; a rationale its aggregator wrote is scored from the extraction job's line on
    its text, like every agent's (an A4 claim in it is leaked: OLR 1/2 here), and waits
    for that line when there is none."""
    from lookahead.claims.inputs import claim_study, sha

    raw = tmp_path / "raw"
    raw.mkdir()
    study = _study(demo_dir, raw)
    model = claim_study(study).backend.model_id
    insts = {i.instance_id: i for i in demo.demo_instances()}

    def claim(k: int, text: str, cat: str) -> dict:
        return {
            "claim_id": k,
            "claim_text": text,
            "original_text": text,
            "temporal_reference": None,
            "claim_category": cat,
            "category_reasoning": "t",
        }

    old = [claim(1, "Acorvia shares trade on the Northbridge exchange.", "B1")]
    leaked = "Brelton stock closed lower on 2022-03-24."
    written = f"{leaked} Brelton shares trade on the Northbridge exchange."
    finals = {
        "c01": (" ".join(c["claim_text"] for c in old), old),  # a line written before
        "c02": (written, None),  # the aggregator's own text
        "c05": ("Some text the extraction job has not read yet.", None),
    }
    with open(raw / "claims_timespec.jsonl", "w") as fh:
        for iid, (rationale, claims) in finals.items():
            i = insts[iid]
            line = {
                "key": f"final-{iid}",
                "model_id": model,
                "instance_id": iid,
                "agent": "timespec",
                "entity": i.firm,
                "task_name": demo.TASK,
                "t_ref": i.t_ref.isoformat(),
                "task_input": i.task_input,
                "outcome": i.outcome,
                "prediction": "down",
                "probability": 0.3,
                "rationale": rationale,
                "claims": claims,
                "final": True,
            }
            fh.write(json.dumps(line) + "\n")
    with open(raw / "claims_extract.jsonl", "w") as fh:
        ext = {
            "key": "x-c02",
            "model_id": model,
            "instance_id": "c02",
            "agent": "timespec",
            "rationale_sha256": sha(written),
            "attempt": 0,
            "valid": True,
            "claims": [claim(1, leaked, "A4"), claim(2, "Brelton shares trade on the Northbridge exchange.", "B1")],
        }
        fh.write(json.dumps(ext) + "\n")
    t = build(study)
    ts = t["instance_leakage"][t["instance_leakage"]["agent"] == "timespec"].set_index("instance_id")
    assert ts.loc["c01", "n_claims"] == 1 and ts.loc["c01", "olr"] == 0.0
    assert ts.loc["c02", "n_claims"] == 2 and ts.loc["c02", "olr"] == 0.5  # 1 leaked (A4) of 2
    assert ts.loc["c05", "status"] == "extraction pending"
    cl = t["claims"][(t["claims"]["agent"] == "timespec") & (t["claims"]["instance_id"] == "c02")]
    assert list(cl["leakage_state"]) == ["leaked", "not_leaked"]
