"""The wild cluster bootstrap p-values against an independent numpy implementation.

The shipped p-values come from the `wildboottest` package (lookahead/stats/wild.py). The
reference below is written from the textbook algorithm (Cameron, Gelbach and Miller 2008;
MacKinnon and Webb 2017: WCR, null imposed, CRV1 t-statistics, Rademacher weights), with
its own dummies design and its own random numbers, so the two agree only within Monte
Carlo error: a difference beyond 4.5 standard errors of the two simulated p-values fails."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lookahead.stats.fe_regression import FitRequest, fit_fe
from lookahead.stats.wild import WildSettings


def panel(seed: int, n_entities: int = 14, n_periods: int = 8, per_cell: int = 3,
          effect: float = 0.12) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    e = np.repeat(np.arange(n_entities), n_periods * per_cell)
    t = np.tile(np.repeat(np.arange(n_periods), per_cell), n_entities)
    n = len(e)
    mu = rng.choice([-1.0, 1.0], n)
    lap = rng.uniform(0, 1, n) * (1 + (e < 3))     # more LAP variation in three entities
    u = rng.normal(0, 0.6, n_entities)[e] * rng.normal(size=n)  # cluster-scaled noise
    y = rng.normal(0, 0.5, n_entities)[e] + rng.normal(0, 0.5, n_periods)[t] + effect * mu * lap + u + rng.normal(size=n)
    return pd.DataFrame({"outcome": y, "mu_hat": mu, "lap": lap, "entity_num": e, "period_num": t})


def reference_wcr(df: pd.DataFrame, term_cols: list[list[str]], j: int, draws: int, seed: int
                  ) -> tuple[float, float, float]:
    """(t, two-sided p, one-sided p) for regressor j by WCR with Rademacher weights."""
    n = len(df)
    X_terms = np.column_stack([np.prod([df[c].to_numpy(float) for c in cols], axis=0) for cols in term_cols])
    ent = df["entity_num"].to_numpy()
    per = df["period_num"].to_numpy()
    D_e = (ent[:, None] == np.unique(ent)[None, :]).astype(float)
    D_t = (per[:, None] == np.unique(per)[None, 1:]).astype(float)   # drop one period level
    X = np.hstack([X_terms, D_e, D_t])
    y = df["outcome"].to_numpy(float)
    groups = [np.where(ent == g)[0] for g in np.unique(ent)]

    def tstats(Y: np.ndarray, X: np.ndarray, col: int) -> np.ndarray:
        XtX_inv = np.linalg.inv(X.T @ X)
        a = XtX_inv[col]
        w = X @ a                                    # b_col = w' y
        B = np.linalg.lstsq(X, Y, rcond=None)[0]
        E = Y - X @ B
        scores = np.stack([w[g] @ E[g] for g in groups])   # (G, draws)
        return B[col] / np.sqrt((scores ** 2).sum(axis=0))

    t_hat = float(tstats(y[:, None], X, j)[0])
    Xr = np.delete(X, j, axis=1)                     # the null b_j = 0 imposed
    fitted_r = Xr @ np.linalg.lstsq(Xr, y, rcond=None)[0]
    u_r = y - fitted_r
    rng = np.random.default_rng(seed)
    v = rng.choice([-1.0, 1.0], size=(len(groups), draws))
    V = np.empty((n, draws))
    for k, g in enumerate(groups):
        V[g] = v[k]
    t_star = tstats(fitted_r[:, None] + u_r[:, None] * V, X, j)
    return t_hat, float(np.mean(np.abs(t_star) > abs(t_hat))), float(np.mean(t_star > t_hat))


def _close(p_lib: float, b_lib: int, p_ref: float, b_ref: int) -> None:
    p = (p_lib + p_ref) / 2
    se = math.sqrt(max(p * (1 - p), 1e-4) * (1 / b_lib + 1 / b_ref))
    assert abs(p_lib - p_ref) <= 4.5 * se, (p_lib, p_ref, se)


@pytest.mark.parametrize("seed", [3, 8])
def test_wild_p_matches_an_independent_wcr(seed):
    df = panel(seed)
    wild = WildSettings(draws=1999, weights="rademacher", seed=11)
    res = fit_fe(df, FitRequest(spec="detection", sample="pre", outcome="outcome",
                                regressors=("mu_hat", "lap", "mu_hat:lap"),
                                one_sided_terms=("mu_hat:lap",), wild_terms=("mu_hat:lap",), wild=wild))
    row = res[res["term"] == "mu_hat:lap"].iloc[0]
    t_ref, p2_ref, p1_ref = reference_wcr(df, [["mu_hat"], ["lap"], ["mu_hat", "lap"]], 2, 4999, seed + 100)
    # the t-statistic is the same regression (the small-sample factor differs, not the sign)
    assert np.sign(t_ref) == np.sign(float(row["t"]))
    _close(float(row["p_wild_two_sided"]), 1999, p2_ref, 4999)
    _close(float(row["p_wild_one_sided"]), 1999, p1_ref, 4999)
    assert 0.0 < p2_ref < 1.0


def test_wild_p_is_reproducible_from_its_seed_and_labelled():
    df = panel(5)
    req = FitRequest(spec="detection", sample="pre", outcome="outcome",
                     regressors=("mu_hat", "lap", "mu_hat:lap"), one_sided_terms=("mu_hat:lap",),
                     wild_terms=("mu_hat:lap",), wild=WildSettings(draws=199, seed=4))
    a, b = fit_fe(df, req), fit_fe(df, req)
    assert a["p_wild_two_sided"].equals(b["p_wild_two_sided"])
    label = a.loc[a["term"] == "mu_hat:lap", "wild_bootstrap"].iloc[0]
    assert label == "WCR bootstrap (webb weights, 199 draws, seed 4, null imposed)"
    assert a.loc[a["term"] == "mu_hat", "p_wild_two_sided"].isna().all()


def test_wild_off_and_not_for_unclustered_fits():
    df = panel(6)
    base = dict(spec="detection", sample="pre", outcome="outcome",
                regressors=("mu_hat", "lap", "mu_hat:lap"), wild_terms=("mu_hat:lap",))
    off = fit_fe(df, FitRequest(**base, wild=WildSettings(draws=0)))
    hc1 = fit_fe(df, FitRequest(**base, cluster="none", wild=WildSettings(draws=99)))
    assert off["p_wild_two_sided"].isna().all() and hc1["p_wild_two_sided"].isna().all()


def test_difference_regression_equals_half_sample_thetas_and_has_a_wild_p():
    """ud x high_lap with entity x half and period x half FE is the two half-sample
    regressions stacked, with ud in sd units of its half: its coefficients are
    theta_low and theta_high - theta_low per sd of U-D. Its dense design is singular as
    pyfixest builds it; the bootstrap's must not be."""
    from lookahead.stats.protocol import StatsSettings, run_sample

    rng = np.random.default_rng(9)
    df = panel(9)
    df["ud"] = rng.normal(size=len(df))
    df["outcome"] = df["outcome"] + 0.3 * df["ud"] * (df["lap"] > df["lap"].median())
    df["high_lap"] = (df["lap"] > df["lap"].median()).astype(int)
    res = run_sample(df, "pre", StatsSettings(wild=WildSettings(draws=199)))
    get = lambda spec, term, col="estimate": float(res.loc[(res["spec"] == spec) & (res["term"] == term), col].iloc[0])  # noqa: E731
    sd = df.groupby("high_lap")["ud"].std()
    hi = get("validation_high_lap", "ud") * sd[1]
    lo = get("validation_low_lap", "ud") * sd[0]
    assert get("validation_difference", "ud") == pytest.approx(lo, rel=1e-8)
    assert get("validation_difference", "ud:high_lap") == pytest.approx(hi - lo, rel=1e-8)
    p = get("validation_difference", "ud:high_lap", "p_wild_one_sided")
    assert 0.0 <= p <= 1.0


def test_not_computed_from_max_clusters_unless_the_verdict_reads_it():
    """With at least wild_bootstrap_max_clusters clusters the bootstrap is skipped with a
    note naming the setting; below wild_bootstrap_min_clusters it always runs (the verdict
    reads it there), whatever max_clusters says."""
    df = panel(7)  # 14 clusters
    base = dict(spec="detection", sample="pre", outcome="outcome",
                regressors=("mu_hat", "lap", "mu_hat:lap"), wild_terms=("mu_hat:lap",))
    skipped = fit_fe(df, FitRequest(**base, wild=WildSettings(draws=99, min_clusters=10, max_clusters=14)))
    assert skipped["p_wild_two_sided"].isna().all() and (skipped["wild_bootstrap"] == "").all()
    assert "wild bootstrap not computed: 14 clusters, at least wild_bootstrap_max_clusters (14)" \
        in skipped["warning"].iloc[0]
    for wild in (WildSettings(draws=99, min_clusters=10, max_clusters=15),
                 WildSettings(draws=99, min_clusters=15, max_clusters=2)):
        ran = fit_fe(df, FitRequest(**base, wild=wild))
        assert ran.loc[ran["term"] == "mu_hat:lap", "p_wild_two_sided"].notna().all()
