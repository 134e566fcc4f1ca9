"""Rescaling LAP by any positive constant changes no t-statistic, p-value or verdict.

pyfixest judges collinearity and demeaning convergence with absolute tolerances; the
regressions therefore run on unit-sd columns and report on the user's scale
(fe_regression.column_scales). These tests multiply LAP by c from 1e-9 to 1e3 (for
Min-K% that is every prompt-token log-prob shifted by log c) on a contaminated and a
clean study the other tests do not use, and compare with c = 1."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_verdict import _sample

from lookahead.stats.protocol import StatsSections, run_protocol
from lookahead.stats.verdict import CONTAMINATION, NO_EVIDENCE, UNDERPOWERED, verdict_frame

MINK = StatsSections.with_defaults(cluster="entity", lap_measure="mink", wild_bootstrap_draws=99)
RECALL = MINK.with_measure("recall")


def study(kind: str, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    mem = kind == "contaminated"
    pre = _sample(rng, 36, 10, 4, 0.0, 1.0, mem, mem)
    post = _sample(rng, 36, 5, 4, 0.0, 0.5, False, False, start_period=10)  # a placebo with power
    return pre, post


def scaled(df: pd.DataFrame, c: float) -> pd.DataFrame:
    out = df.copy()
    out["lap"] = out["lap"] * c
    return out


def run(pre, post, settings, c):
    p, q = scaled(pre, c), scaled(post, c)
    res = run_protocol(p, q, settings)
    return res, verdict_frame(res, p, q, settings).iloc[0]


@pytest.fixture(scope="module")
def contaminated():
    pre, post = study("contaminated", 101)
    return pre, post, run(pre, post, MINK, 1.0)


@pytest.fixture(scope="module")
def clean():
    pre, post = study("clean", 202)
    return pre, post, run(pre, post, MINK, 1.0)


def _same_tests(a: pd.DataFrame, b: pd.DataFrame) -> None:
    for col in ("t", "p_two_sided", "p_one_sided", "p_wild_two_sided", "p_wild_one_sided", "r2"):
        x = a[col].astype("float64").to_numpy()
        y = b[col].astype("float64").to_numpy()
        assert np.array_equal(np.isnan(x), np.isnan(y)), col
        ok = ~np.isnan(x)
        np.testing.assert_allclose(y[ok], x[ok], rtol=1e-6, atol=1e-12, err_msg=col)
    assert (a["dropped_terms"].fillna("") == b["dropped_terms"].fillna("")).all()


@pytest.mark.parametrize("c", [1e-9, 1e3])
def test_mink_scale_leaves_tests_and_verdict_unchanged_contaminated(contaminated, c):
    pre, post, (res1, v1) = contaminated
    assert v1["verdict"] == CONTAMINATION, v1["reason"]
    res, v = run(pre, post, MINK, c)
    _same_tests(res1, res)
    assert v["verdict"] == v1["verdict"]
    # coefficients come back on the user's scale: beta_3 and its SE scale with 1/c
    b1 = res1.loc[res1["term"] == "mu_hat:lap", "estimate"].astype(float).to_numpy()
    b = res.loc[res["term"] == "mu_hat:lap", "estimate"].astype(float).to_numpy()
    np.testing.assert_allclose(b * c, b1, rtol=1e-6)


@pytest.mark.parametrize("c", [1e-6])
def test_mink_scale_leaves_tests_and_verdict_unchanged_clean(clean, c):
    pre, post, (res1, v1) = clean
    assert v1["verdict"] == NO_EVIDENCE, v1["reason"]
    res, v = run(pre, post, MINK, c)
    _same_tests(res1, res)
    assert v["verdict"] == v1["verdict"]


@pytest.mark.slow
@pytest.mark.parametrize("c", [1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 10, 100, 1e3])
def test_mink_every_decade(contaminated, clean, c):
    for pre, post, (res1, v1) in (contaminated, clean):
        res, v = run(pre, post, MINK, c)
        _same_tests(res1, res)
        assert v["verdict"] == v1["verdict"] and v["reason"].split(":")[0] == v1["reason"].split(":")[0]


def test_recall_scale_changes_verdict_only_through_the_variation_rule(contaminated, clean):
    """Recall LAP is a probability: its absolute sd rule (0.01) is documented; t-statistics
    are unchanged at any scale, and once sd < 0.01 the study is Underpowered whether
    beta_3 is significant or not: an estimate per unit of a LAP that barely varies does
    not decide the verdict (docs/verdict.md, path significant_no_variation)."""
    for pre, post, _ in (contaminated, clean):
        res1, v1 = run(pre, post, RECALL, 1.0)
        res, v = run(pre, post, RECALL, 1e-4)
        _same_tests(res1, res)
        assert v1["verdict"] in (CONTAMINATION, NO_EVIDENCE), v1["reason"]
        assert v["verdict"] == UNDERPOWERED, v["reason"]
        assert "recall LAP is a probability, so the rule is absolute" in v["reason"]
