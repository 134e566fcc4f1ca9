"""The regression and ranking demos (lookahead.claims.demo_kinds) on their planted truth.

Default suite, without a model: the tables fed with the rule models' answers reproduce
every planted leakage state and OLR, and the Shapley-DCLR computed here by enumerating
all orders of the claims with v(S) written independently (the answer's value; 1 minus
scipy's Spearman rho against the full ranking). With the shipped tiny models: their
answers to every coalition of a subset of instances parse and follow the rule."""

from __future__ import annotations

import itertools
import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lookahead.claims import demo_kinds as dk
from lookahead.claims.inputs import ClaimsResolved, load_predictions
from lookahead.claims.shapley import plan_for
from lookahead.claims.tables import build, claims_sha, instance_agent_id, instance_claims
from lookahead.claims.tasks import parse_ranking
from lookahead.config import load_study

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "demo" / "claims" / "kinds_models"


def _v(kind: str, inst: dk.KindInstance, answer: str, full: str) -> float:
    if kind == "regression":
        return float(answer)
    a, b = parse_ranking(answer, inst.items), parse_ranking(full, inst.items)
    return 1 - stats.spearmanr([a.index(x) for x in inst.items], [b.index(x) for x in inst.items]).statistic


def _shapley(n: int, v) -> np.ndarray:
    phi = np.zeros(n)
    orders = list(itertools.permutations(range(n)))
    for order in orders:
        s: frozenset = frozenset()
        for i in order:
            phi[i] += v(s | {i}) - v(s)
            s = s | {i}
    return phi / len(orders)


@pytest.mark.parametrize("kind", ["regression", "ranking"])
@pytest.mark.parametrize("model", ["leaky", "prudent"])
def test_planted_truth_with_the_rule_models(kind, model, tmp_path):
    dk.build(tmp_path, train=False)
    out = tmp_path / kind
    insts = {i.instance_id: i for i in dk.demo_instances(kind)}
    rows = [
        {
            "instance_id": i.instance_id,
            "agent": dk.AGENT,
            "entity": i.entity,
            "task": f"demo_{kind}",
            "t_ref": i.t_ref.isoformat(),
            "task_input": i.task_input,
            "prediction": dk.rule_answer(model, i, i.claims),
            "rationale": i.rationale,
            "outcome": i.outcome,
        }
        for i in insts.values()
    ]
    pd.DataFrame(rows).to_csv(out / f"predictions_{model}.csv", index=False)
    raw = tmp_path / "raw"
    study = load_study(
        None,
        overrides={
            **{k: v for k, v in dk.study_vars(out, kind, model, tmp_path).items() if k != "extends"},
            "claims_raw_dir": str(raw),
            "claims_predictions_path": str(out / f"predictions_{model}.csv"),
            "claims_corpus_path": str(out / "corpus.csv"),
            "claims_extractions_path": str(out / "extractions.jsonl"),
        },
    )
    st = ClaimsResolved.from_study(study)
    raw.mkdir()
    with open(raw / "claims_value.jsonl", "w") as fh:  # the rule model's answer per coalition
        for r, ex in instance_claims(study, st, load_predictions(study, st)[0]):
            inst, n = insts[r["instance_id"]], len(ex.claims)
            key = instance_agent_id(r["instance_id"], r["agent"])
            plan = plan_for(n, key, st.claims.claims_exact_max, st.claims.claims_mc_permutations, st.claims.claims_shapley_seed)
            for m in plan.masks:
                ans = dk.rule_answer(model, inst, [inst.claims[i] for i in range(n) if m >> i & 1])
                parsed = st.kind.coalition_answer(ans, [], st, st.kind.items(r["prediction"]))
                fh.write(
                    json.dumps(
                        {
                            "key": f"{r['instance_id']}-{m}",
                            "model_id": study.backend.model_id,
                            "instance_id": r["instance_id"],
                            "agent": r["agent"],
                            "mask": m,
                            "claims_sha256": claims_sha(ex.claims),
                            "task_kind": kind,
                            "params": {
                                "coalition_prompt": st.claims.claims_coalition_prompt,
                                "coalition_value": st.claims.claims_coalition_value,
                            },
                            **parsed,
                        }
                    )
                    + "\n"
                )
    t = build(study)
    claims, inst_t = t["claims"], t["instance_leakage"].set_index("instance_id")
    truth_c = pd.read_csv(out / "truth_claims.csv")
    m = claims.merge(truth_c, on=["instance_id", "claim_id"])
    assert len(m) == len(truth_c) == len(claims) and (m["leakage_state"] == m["expected_state"]).all()
    truth_i = pd.read_csv(out / "truth_instances.csv").set_index("instance_id")
    assert (inst_t["status"] == "ok").all() and set(inst_t["task_kind"]) == {kind}
    assert np.allclose(inst_t["olr"].astype(float), truth_i.loc[inst_t.index, "expected_olr"])
    # claims_exact_max 5: a 6-claim instance is exact only where its seeded draw of 100
    # permutations asks for every one of the 64 coalitions anyway (docs/claims.md)
    for iid, r in inst_t[inst_t["n_claims"] > st.claims.claims_exact_max].iterrows():
        n = int(r["n_claims"])
        rng = np.random.default_rng(
            [st.claims.claims_shapley_seed, zlib.crc32(instance_agent_id(iid, r["agent"]).encode("utf-8"))]
        )
        asked = {0} | {int(m) for _ in range(100) for m in np.bitwise_or.accumulate(1 << rng.permutation(n))}
        assert r["shapley_method"] == ("exact" if len(asked) == 1 << n else "monte_carlo")
    for iid, r in inst_t.iterrows():
        inst = insts[iid]
        n = len(inst.claims)
        assert abs(r["efficiency_gap"]) < 1e-9
        if r["shapley_method"] != "exact":
            continue
        full = dk.rule_answer(model, inst, inst.claims)
        phi = _shapley(n, lambda s: _v(kind, inst, dk.rule_answer(model, inst, [inst.claims[i] for i in s]), full))
        leaked = np.array([c.expected_state == "leaked" for c in inst.claims], dtype=float)
        w = np.abs(phi)
        want = None if w.sum() == 0 else float((w * leaked).sum() / w.sum())
        got = r["shapley_dclr"]
        assert (want is None and pd.isna(got)) or got == pytest.approx(want, abs=1e-12)
        if want is not None:
            assert want == pytest.approx(truth_i.loc[iid, f"ideal_dclr_{model}"], abs=1e-12)
    dclr = inst_t["shapley_dclr"].astype(float).mean()
    assert dclr > 0.4 if model == "leaky" else dclr == 0.0


#: Share of coalitions on which each shipped model gives its rule's answer over the first
#: four instances' every coalition (the empty set too), as the shipped models measure it
#: (the prudent model departs on 7 of the 112 regression ones). Over every demo instance's
#: scored coalitions each follows its rule on at least 95% (docs/claims.md, the regression
#: and ranking demos; benchmarks/results/claims_rule_following_seed.json).
RULE_AGREEMENT_MIN = {
    ("leaky", "regression"): 1.0,
    ("leaky", "ranking"): 1.0,
    ("prudent", "regression"): 0.93,
    ("prudent", "ranking"): 1.0,
}


@pytest.mark.skipif(not (MODELS_DIR / "leaky" / "model.safetensors").exists(), reason="demo models not built")
@pytest.mark.parametrize("model", ["leaky", "prudent"])
def test_shipped_models_answer_in_format_and_follow_their_rule(model):
    """Every coalition of the first four instances of each kind, answered greedily by the
    shipped model, parses as the kind's answer; the share equal to the rule's answer is
    at least the documented one."""
    from lookahead.backends.transformers_backend import TransformersBackend
    from lookahead.claims.tasks import KINDS

    backend = TransformersBackend(f"demo-claims-kinds-{model}", model_path=str(MODELS_DIR / model))
    for kind in ("regression", "ranking"):
        same = total = 0
        for inst in dk.demo_instances(kind)[:4]:
            n = len(inst.claims)
            coals = [[inst.claims[i] for i in range(n) if m >> i & 1] for m in range(1 << n)]
            gens = backend.generate([inst.prompt(c) for c in coals], 32, 0)
            for c, g in zip(coals, gens, strict=False):
                KINDS[kind].coalition_answer(g.response_text, [], dk.KS, sorted(inst.items) or None)  # parses
                same += g.response_text.strip() == dk.rule_answer(model, inst, c)
                total += 1
        assert same / total >= RULE_AGREEMENT_MIN[(model, kind)], (model, kind, same, total)
