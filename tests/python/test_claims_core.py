"""The deterministic core of claim-level leakage: schema, dating rules, Shapley, metrics.

Shapley values are checked against games whose values are known in closed form
(additive games, unanimity games and their sums via Harsanyi dividends) and against
brute-force enumeration of all n! orderings, never against the code under test."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math

import numpy as np
import pytest

from lookahead.claims import dating, metrics, schema, shapley

D = dt.date


# ----------------------------------------------------------------------------- schema


def _claim(**kw):
    base = {
        "claim_id": 1,
        "claim_text": "Acme opened a plant on 2021-03-02.",
        "original_text": "Acme opened a plant",
        "temporal_reference": "2021-03-02",
        "claim_category": "A1",
        "category_reasoning": "a dated event",
    }
    base.update(kw)
    return base


def test_schema_accepts_valid_and_renumbers():
    text = (
        'Here you go:\n```json\n{"claims": [' + ",".join(__import__("json").dumps(_claim(claim_id=i)) for i in (7, 9)) + "]}\n```"
    )
    claims = schema.parse_extraction_text(text)
    assert [c.claim_id for c in claims] == [1, 2]
    assert claims[0].category == "A1" and claims[0].temporal_reference == "2021-03-02"


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({"claims": [_claim(claim_category="C9")]}, "claims/0/claim_category"),
        ({"claims": [_claim(claim_text="")]}, "claims/0/claim_text"),
        ({"claims": [{k: v for k, v in _claim().items() if k != "original_text"}]}, "original_text"),
        ({"claims": [_claim(extra=1)]}, "Additional properties"),
        ({"items": []}, "claims"),
    ],
)
def test_schema_rejects_with_location(bad, fragment):
    with pytest.raises(schema.ExtractionError, match=fragment):
        schema.claims_from_object(bad)


@pytest.mark.parametrize("text", ["", "   ", None, "no json here", "{not json}"])
def test_unparseable_answers_raise(text):
    with pytest.raises(schema.ExtractionError):
        schema.parse_extraction_text(text)


def test_empty_claim_list_is_valid():
    assert schema.parse_extraction_text('{"claims": []}') == []


# ----------------------------------------------------------------------------- dating


@pytest.mark.parametrize(
    "text, start, end",
    [
        ("2023-03-15", D(2023, 3, 15), D(2023, 3, 15)),
        ("March 15, 2023", D(2023, 3, 15), D(2023, 3, 15)),
        ("15 Mar 2023", D(2023, 3, 15), D(2023, 3, 15)),
        ("2023-02", D(2023, 2, 1), D(2023, 2, 28)),
        ("March 2023", D(2023, 3, 1), D(2023, 3, 31)),
        ("Q3 2023", D(2023, 7, 1), D(2023, 9, 30)),
        ("2023 Q4", D(2023, 10, 1), D(2023, 12, 31)),
        ("H1 2024", D(2024, 1, 1), D(2024, 6, 30)),
        ("2023", D(2023, 1, 1), D(2023, 12, 31)),
        ("FY2020", D(2020, 1, 1), D(2020, 12, 31)),
        ("2018-19", D(2018, 1, 1), D(2019, 12, 31)),
        ("2011-12", D(2011, 12, 1), D(2011, 12, 31)),  # ISO month, not a season
        ("2024-02-29", D(2024, 2, 29), D(2024, 2, 29)),
    ],
)
def test_parse_period(text, start, end):
    assert dating.parse_period(text) == dating.Period(start, end)


@pytest.mark.parametrize("text", [None, "", "recently", "last spring", "2023-02-30", "2023-13", "Q5 2023"])
def test_unparseable_period_is_none(text):
    assert dating.parse_period(text) is None


T = D(2023, 6, 30)


@pytest.mark.parametrize("cat", ["A4", "A5"])
def test_outcome_and_consequence_always_leaked(cat):
    # even with a pre-t_ref supporting document and an early reference
    lk = dating.claim_leakage(cat, T, [D(2000, 1, 1)], "1999")
    assert lk.state == "leaked"


@pytest.mark.parametrize("cat", ["B1", "B2"])
def test_background_never_leaked(cat):
    lk = dating.claim_leakage(cat, T, [D(2030, 1, 1)], "2030")
    assert lk.state == "not_leaked"


@pytest.mark.parametrize("cat", ["A1", "A2", "A3"])
def test_tau_is_earliest_supporting_document(cat):
    assert dating.claim_leakage(cat, T, [D(2023, 7, 1), D(2023, 6, 30)], None) == dating.Leakage(
        "not_leaked", D(2023, 6, 30), "earliest supporting document 2023-06-30"
    )
    lk = dating.claim_leakage(cat, T, [D(2023, 8, 1), D(2023, 7, 1)], None)
    assert (lk.state, lk.tau) == ("leaked", D(2023, 7, 1))


def test_unsupported_claims_by_temporal_reference_and_vague_period_setting():
    # reference strictly after t_ref: leaked under either reading
    for mode in dating.VAGUE_PERIOD_CHOICES:
        lk = dating.claim_leakage("A2", T, [], "Q3 2023", mode)
        assert lk.state == "leaked"
    # a period containing t_ref: end (default) -> leaked, start -> unverifiable
    assert dating.claim_leakage("A1", T, [], "2023").state == "leaked"
    assert dating.claim_leakage("A1", T, [], "2023").tau == D(2023, 12, 31)
    assert dating.claim_leakage("A1", T, [], "2023", "start").state == "unverifiable"
    # before t_ref without support: unverifiable; unparseable: unverifiable with the reason
    assert dating.claim_leakage("A3", T, [], "2022").state == "unverifiable"
    lk = dating.claim_leakage("A3", T, [], "sometime soon")
    assert lk.state == "unverifiable" and "unparseable" in lk.reason
    with pytest.raises(ValueError, match="claims_vague_period"):
        dating.claim_leakage("A1", T, [], "2023", "middle")
    with pytest.raises(ValueError, match="category"):
        dating.claim_leakage("C1", T, [], None)


# ----------------------------------------------------------------------------- Shapley


def _brute_force(n, v):
    """Average marginal contribution over all n! orderings (the definition)."""
    phi = np.zeros(n)
    for perm in itertools.permutations(range(n)):
        mask = 0
        for i in perm:
            phi[i] += v(mask | 1 << i) - v(mask)
            mask |= 1 << i
    return phi / math.factorial(n)


def _harsanyi_game(n, seed):
    """v = sum_T d_T u_T over random coalitions T; phi_i = sum_{T contains i} d_T / |T|."""
    rng = np.random.default_rng(seed)
    dividends = {}
    for _ in range(3 * n):
        members = frozenset(int(x) for x in rng.choice(n, size=rng.integers(1, n + 1), replace=False))
        dividends[members] = dividends.get(members, 0.0) + float(rng.normal())

    def v(mask):
        return sum(d for T, d in dividends.items() if all(mask >> i & 1 for i in T))

    truth = np.zeros(n)
    for T, d in dividends.items():
        for i in T:
            truth[i] += d / len(T)
    return v, truth


@pytest.mark.parametrize("n", [1, 2, 5, 10])
def test_exact_shapley_known_games(n):
    v, truth = _harsanyi_game(n, seed=n)
    np.testing.assert_allclose(shapley.exact_shapley(n, v), truth, atol=1e-12, rtol=0)
    w = np.arange(1, n + 1) / 7.0
    additive = lambda mask: float(sum(w[i] for i in range(n) if mask >> i & 1))
    np.testing.assert_allclose(shapley.exact_shapley(n, additive), w, atol=1e-12, rtol=0)


@pytest.mark.parametrize("n", [3, 6])
def test_exact_shapley_matches_enumeration_of_orderings(n):
    rng = np.random.default_rng(100 + n)
    table = rng.normal(size=1 << n)
    v = lambda mask: float(table[mask])
    np.testing.assert_allclose(shapley.exact_shapley(n, v), _brute_force(n, v), atol=1e-12, rtol=0)


def test_plan_exact_and_monte_carlo_switch():
    assert shapley.plan_for(10, "a").method == "exact"
    assert len(shapley.plan_for(10, "a").masks) == 1024
    p = shapley.plan_for(11, "a", permutations=7, seed=42)
    assert p.method == "monte_carlo" and len(p.permutations) == 7
    assert p.masks[:2] == [0, (1 << 11) - 1] and len(set(p.masks)) == len(p.masks)
    assert shapley.plan_for(11, "a", permutations=7, seed=42) == p  # reproducible
    assert shapley.plan_for(11, "b", permutations=7, seed=42) != p  # instance-specific
    assert shapley.plan_for(0, "a").masks == [0]
    with pytest.raises(ValueError, match="claims_mc_permutations"):
        shapley.plan_for(12, "a", permutations=1)


def test_monte_carlo_within_reported_standard_errors_and_efficient():
    z_all = []
    for seed in range(6):
        n = 12
        v, truth = _harsanyi_game(n, seed=1000 + seed)
        plan = shapley.plan_for(n, f"inst{seed}", exact_max=10, permutations=100, seed=42)
        values = {m: v(m) for m in plan.masks}
        res = shapley.shapley_values(plan, values)
        assert res.method == "monte_carlo"
        # every permutation's marginals sum to v(N) - v(empty): efficiency holds exactly
        assert res.total == pytest.approx(res.v_all - res.v_empty, abs=1e-9)
        z = (res.phi - truth) / np.where(res.se > 0, res.se, np.inf)
        z_all.extend(z.tolist())
        assert np.all(np.abs(z) < 4.5)
    z_all = np.abs(np.array(z_all))
    # roughly normal errors: about 95% within 2 SE
    assert np.mean(z_all < 2) > 0.85


def test_shapley_values_exact_efficiency_and_missing_coalitions():
    n = 4
    v, _ = _harsanyi_game(n, seed=7)
    plan = shapley.plan_for(n, "x")
    values = {m: v(m) for m in plan.masks}
    res = shapley.shapley_values(plan, values)
    assert res.total == pytest.approx(res.v_all - res.v_empty, abs=1e-12)
    assert np.all(res.se == 0)
    del values[5]
    with pytest.raises(KeyError, match="not scored"):
        shapley.shapley_values(plan, values)


# ----------------------------------------------------------------------------- metrics


def test_metrics_by_hand():
    states = ["leaked", "not_leaked", "unverifiable", "leaked"]
    phi = [0.5, -0.3, 0.1, 0.1]
    assert metrics.olr(states) == 0.5
    assert metrics.olr(states, unverifiable_leaked=True) == 0.75
    assert metrics.shapley_dclr(phi, states) == pytest.approx(0.6 / 1.0)
    assert metrics.shapley_dclr(phi, states, True) == pytest.approx(0.7 / 1.0)
    assert metrics.top_k_leakage(phi, states, 1) == 1.0
    assert metrics.top_k_leakage(phi, states, 3) == pytest.approx(1 / 3)  # 0.5, -0.3, 0.1 (first tie)
    assert metrics.top_k_leakage(phi, states, 3, True) == pytest.approx(2 / 3)
    assert metrics.top_k_leakage(phi[:2], states[:2], 3) == pytest.approx(1 / 3)  # fewer claims than K: 1/K
    assert metrics.top_k_leakage(phi[:2], states[:2], 3, denominator="available") == 0.5  # 1/min(K, n)
    assert metrics.olr([]) is None and metrics.shapley_dclr([], []) is None
    assert metrics.shapley_dclr([0.0, 0.0], ["leaked", "not_leaked"]) is None
    assert metrics.brier([0.8, 0.3], [1, 0]) == pytest.approx((0.04 + 0.09) / 2)


# ----------------------------------------------------------------------------- extraction recall


def test_extraction_recall_matching():
    import pandas as pd

    from lookahead.claims.evaluate import extraction_recall, token_f1

    assert token_f1("Acme opened a new factory on 2022-03-01.", "acme opened a new factory on 2022-03-01") == 1.0
    assert token_f1("a b", "c d") == 0.0
    truth = pd.DataFrame(
        {
            "instance_id": ["i1", "i1", "i2"],
            "claim_text": [
                "Acme opened a new factory on 2022-03-01.",
                "Acme stock closed higher on 2022-04-01.",
                "Beta makes pumps.",
            ],
            "category": ["A1", "A4", "B1"],
        }
    )
    ext = pd.DataFrame(
        {
            "instance_id": ["i1", "i1", "i2"],
            "claim_text": [
                "Acme opened a new factory on 2022-03-01",  # match, same category
                "Acme stock went up",  # no match (F1 < 0.7)
                "Beta makes pumps",
            ],  # match, other category
            "category": ["A1", "A4", "B2"],
        }
    )
    r = extraction_recall(ext, truth)
    assert (r["n_planted"], r["n_recalled"]) == (3, 2)
    assert r["recall"] == pytest.approx(2 / 3) and r["category_agreement"] == 0.5
    assert extraction_recall(ext.iloc[0:0], truth)["recall"] == 0.0


def test_extraction_benchmark_schema_check_and_timing():
    """The SmolLM2 measurement's own checks: a line stored as valid must validate, one
    stored as invalid must not parse (either lie is an error), and model time counts each
    batch once."""
    from research.claims_extraction_benchmark import generation_seconds, schema_check

    good = {
        "claim_id": 1,
        "claim_text": "Acme opened a plant.",
        "original_text": "Acme opened a plant.",
        "temporal_reference": None,
        "claim_category": "A1",
        "category_reasoning": "event",
    }
    t0, t1, t2 = "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:10+00:00", "2026-01-01T00:00:15+00:00"
    lines = [
        {"instance_id": "i1", "attempt": 0, "valid": True, "claims": [good], "started_at": t0, "finished_at": t1},
        {"instance_id": "i2", "attempt": 0, "valid": False, "response_text": "no json here", "started_at": t0, "finished_at": t1},
        {"instance_id": "i2", "attempt": 1, "valid": True, "claims": [], "started_at": t1, "finished_at": t2},
    ]
    r = schema_check(lines)
    assert (r["n_answers"], r["n_valid_answers"]) == (3, 2)
    assert r["by_attempt"] == {"0": {"answers": 2, "valid": 1}, "1": {"answers": 1, "valid": 1}}
    assert generation_seconds(lines) == 15.0
    with pytest.raises(schema.ExtractionError):
        schema_check([{**lines[0], "claims": [{**good, "claim_category": "C9"}]}])
    with pytest.raises(AssertionError, match="stored as invalid but parses"):
        schema_check([{**lines[1], "response_text": json.dumps({"claims": [good]})}])
