"""The wild cluster bootstrap p-values against two independent implementations.

The shipped p-values come from the "fast and wild" route in lookahead/stats/wild.py
(fixed effects partialled out once, draws on cluster sums). They are checked against the
pinned `wildboottest` package on its dense dummies design, and against a reference written
here from the textbook algorithm (Cameron, Gelbach and Miller 2008; MacKinnon and Webb
2017: WCR, null imposed, CRV1 t-statistics, Rademacher weights), with its own dummies
design. Each uses its own random numbers, so they agree only within Monte Carlo error: a
difference beyond 4.5 standard errors of the two simulated p-values fails."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from lookahead.settings_sections import ProtocolSettings
from lookahead.stats.fe_regression import FitRequest, fit_fe


def panel(seed: int, n_entities: int = 14, n_periods: int = 8, per_cell: int = 3, effect: float = 0.12) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    e = np.repeat(np.arange(n_entities), n_periods * per_cell)
    t = np.tile(np.repeat(np.arange(n_periods), per_cell), n_entities)
    n = len(e)
    mu = rng.choice([-1.0, 1.0], n)
    lap = rng.uniform(0, 1, n) * (1 + (e < 3))  # more LAP variation in three entities
    u = rng.normal(0, 0.6, n_entities)[e] * rng.normal(size=n)  # cluster-scaled noise
    y = rng.normal(0, 0.5, n_entities)[e] + rng.normal(0, 0.5, n_periods)[t] + effect * mu * lap + u + rng.normal(size=n)
    return pd.DataFrame({"outcome": y, "mu_hat": mu, "lap": lap, "entity_num": e, "period_num": t})


def reference_wcr(df: pd.DataFrame, term_cols: list[list[str]], j: int, draws: int, seed: int) -> tuple[float, float, float]:
    """(t, two-sided p, one-sided p) for regressor j by WCR with Rademacher weights."""
    n = len(df)
    X_terms = np.column_stack([np.prod([df[c].to_numpy(float) for c in cols], axis=0) for cols in term_cols])
    ent = df["entity_num"].to_numpy()
    per = df["period_num"].to_numpy()
    D_e = (ent[:, None] == np.unique(ent)[None, :]).astype(float)
    D_t = (per[:, None] == np.unique(per)[None, 1:]).astype(float)  # drop one period level
    X = np.hstack([X_terms, D_e, D_t])
    y = df["outcome"].to_numpy(float)
    groups = [np.where(ent == g)[0] for g in np.unique(ent)]

    def tstats(Y: np.ndarray, X: np.ndarray, col: int) -> np.ndarray:
        XtX_inv = np.linalg.inv(X.T @ X)
        a = XtX_inv[col]
        w = X @ a  # b_col = w' y
        B = np.linalg.lstsq(X, Y, rcond=None)[0]
        E = Y - X @ B
        scores = np.stack([w[g] @ E[g] for g in groups])  # (G, draws)
        return B[col] / np.sqrt((scores**2).sum(axis=0))

    t_hat = float(tstats(y[:, None], X, j)[0])
    Xr = np.delete(X, j, axis=1)  # the null b_j = 0 imposed
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
    wild = ProtocolSettings.with_defaults(wild_bootstrap_draws=1999, wild_bootstrap_weights="rademacher", wild_bootstrap_seed=11)
    res = fit_fe(
        df,
        FitRequest(
            spec="detection",
            sample="pre",
            outcome="outcome",
            regressors=("mu_hat", "lap", "mu_hat:lap"),
            one_sided_terms=("mu_hat:lap",),
            wild_terms=("mu_hat:lap",),
            wild=wild,
        ),
    )
    row = res[res["term"] == "mu_hat:lap"].iloc[0]
    t_ref, p2_ref, p1_ref = reference_wcr(df, [["mu_hat"], ["lap"], ["mu_hat", "lap"]], 2, 4999, seed + 100)
    # the t-statistic is the same regression (the small-sample factor differs, not the sign)
    assert np.sign(t_ref) == np.sign(float(row["t"]))
    _close(float(row["p_wild_two_sided"]), 1999, p2_ref, 4999)
    _close(float(row["p_wild_one_sided"]), 1999, p1_ref, 4999)
    assert 0.0 < p2_ref < 1.0


def test_wild_p_is_reproducible_from_its_seed_and_labelled():
    df = panel(5)
    req = FitRequest(
        spec="detection",
        sample="pre",
        outcome="outcome",
        regressors=("mu_hat", "lap", "mu_hat:lap"),
        one_sided_terms=("mu_hat:lap",),
        wild_terms=("mu_hat:lap",),
        wild=ProtocolSettings.with_defaults(wild_bootstrap_draws=199, wild_bootstrap_seed=4),
    )
    a, b = fit_fe(df, req), fit_fe(df, req)
    assert a["p_wild_two_sided"].equals(b["p_wild_two_sided"])
    row = a.loc[a["term"] == "mu_hat:lap"].iloc[0]
    draws = int(row["wild_draws"])
    assert draws >= 199
    assert row["wild_bootstrap"] == f"WCR bootstrap (webb weights, {draws} draws, seed 4, null imposed)"
    assert a.loc[a["term"] == "mu_hat", "p_wild_two_sided"].isna().all()


def test_wild_off_and_not_for_unclustered_fits():
    df = panel(6)
    base = dict(
        spec="detection", sample="pre", outcome="outcome", regressors=("mu_hat", "lap", "mu_hat:lap"), wild_terms=("mu_hat:lap",)
    )
    off = fit_fe(df, FitRequest(**base, wild=ProtocolSettings.with_defaults(wild_bootstrap_draws=0)))
    hc1 = fit_fe(df, FitRequest(**base, cluster="none", wild=ProtocolSettings.with_defaults(wild_bootstrap_draws=99)))
    assert off["p_wild_two_sided"].isna().all() and hc1["p_wild_two_sided"].isna().all()


def test_difference_regression_equals_half_sample_thetas_and_has_a_wild_p():
    """ud x high_lap with entity x half and period x half FE is the two half-sample
    regressions stacked, with ud in sd units of its half: its coefficients are
    theta_low and theta_high - theta_low per sd of U-D. Its dense design is singular as
    pyfixest builds it; the bootstrap's must not be."""
    from lookahead.stats.protocol import StatsSections, run_sample

    rng = np.random.default_rng(9)
    df = panel(9)
    df["ud"] = rng.normal(size=len(df))
    df["outcome"] = df["outcome"] + 0.3 * df["ud"] * (df["lap"] > df["lap"].median())
    df["high_lap"] = (df["lap"] > df["lap"].median()).astype(int)
    res = run_sample(df, "pre", StatsSections.with_defaults(wild_bootstrap_draws=199))
    get = lambda spec, term, col="estimate": float(res.loc[(res["spec"] == spec) & (res["term"] == term), col].iloc[0])
    sd = df.groupby("high_lap")["ud"].std()
    hi = get("validation_high_lap", "ud") * sd[1]
    lo = get("validation_low_lap", "ud") * sd[0]
    assert get("validation_difference", "ud") == pytest.approx(lo, rel=1e-8)
    assert get("validation_difference", "ud:high_lap") == pytest.approx(hi - lo, rel=1e-8)
    p = get("validation_difference", "ud:high_lap", "p_wild_one_sided")
    assert 0.0 <= p <= 1.0


def _arrays(df: pd.DataFrame, fe=("entity_num", "period_num")):
    x = np.column_stack([df["mu_hat"], df["lap"], df["mu_hat"] * df["lap"]]).astype(float)
    return (df["outcome"].to_numpy(float), x, [df[c].to_numpy() for c in fe], df["entity_num"].to_numpy())


@pytest.mark.parametrize("seed,fe", [(3, ("entity_num",)), (8, ("entity_num",)), (4, ("entity_num", "period_num"))])
def test_fast_wild_matches_the_wildboottest_package(seed, fe):
    """The fast route against the pinned `wildboottest` package on its dense dummies design
    (pyfixest's call sequence), within Monte Carlo error. With the fixed effects nested in
    the clusters the two bootstraps are the same algorithm; with period effects crossed
    over entity clusters they differ by the O(1/G_t) term lookahead/stats/wild.py
    documents, which 30 entities per period make small against the Monte Carlo error."""
    from lookahead.stats.wild import wild_p, wild_p_dense

    df = panel(seed, n_entities=30 if len(fe) == 2 else 14)
    y, x, codes, cl = _arrays(df, fe)
    s = ProtocolSettings.with_defaults(wild_bootstrap_draws=4999, wild_bootstrap_weights="rademacher", wild_bootstrap_seed=seed)
    fast = wild_p(y, x, codes, cl, 2, s, one_sided=True)
    lib = replace(s, wild_bootstrap_seed=seed + 1000)
    lib_two, lib_one = wild_p_dense(y, x, codes, cl, 2, lib)
    _close(fast.p_two, fast.draws, lib_two, 4999)
    _close(fast.p_one, fast.draws, lib_one, 4999)


def test_runs_at_many_clusters_with_g_star_against_a_dummies_formula():
    """No cluster limit: 300 clusters get a bootstrap p. G*(0) equals Carter, Schnepel and
    Steigerwald's formula written on the dummies design (w = Z (Z'Z)^-1 e_j, gamma_g = the
    sum of w^2 over cluster g, G* = G / (1 + var(gamma) / mean(gamma)^2))."""
    df = panel(12, n_entities=300, n_periods=4, per_cell=2)
    df.loc[df["entity_num"] < 10, "lap"] *= 6.0  # a few clusters carry the variation
    req = FitRequest(
        spec="detection",
        sample="pre",
        outcome="outcome",
        regressors=("mu_hat", "lap", "mu_hat:lap"),
        one_sided_terms=("mu_hat:lap",),
        wild_terms=("mu_hat:lap",),
        wild=ProtocolSettings.with_defaults(wild_bootstrap_draws=199),
    )
    row = fit_fe(df, req).set_index("term").loc["mu_hat:lap"]
    assert int(row["n_clusters"]) == 300 and np.isfinite(row["p_wild_one_sided"])
    e, t = df["entity_num"].to_numpy(), df["period_num"].to_numpy()
    Z = np.hstack(
        [
            np.column_stack([df["mu_hat"], df["lap"], df["mu_hat"] * df["lap"]]),
            (e[:, None] == np.unique(e)[None, :]).astype(float),
            (t[:, None] == np.unique(t)[None, 1:]).astype(float),
        ]
    )
    w = Z @ np.linalg.inv(Z.T @ Z)[2]
    gamma = np.bincount(e, weights=w * w)
    g_star = len(gamma) / (1 + gamma.var() / gamma.mean() ** 2)
    assert float(row["n_clusters_effective"]) == pytest.approx(g_star, rel=1e-6)
    assert float(row["n_clusters_effective"]) < 100  # 300 clusters, but a few carry it


def test_draws_are_extended_near_a_threshold_on_the_same_stream():
    """A p within two Monte Carlo SEs of a threshold gets more draws (B -> 4(B+1)-1, up to
    the cap); the first B draws are the same stream, so the extended p refines the first."""
    from lookahead.stats.wild import PartialledDesign, near_threshold

    df = panel(3)
    y, x, codes, cl = _arrays(df)
    d = PartialledDesign(y, x, codes, cl)
    s = ProtocolSettings.with_defaults(wild_bootstrap_draws=399, wild_bootstrap_seed=2)
    first = d.bootstrap(2, s, one_sided=True, max_draws=399)
    assert first.draws == 399
    # make the first p "near a threshold" by putting the threshold there
    ext = d.bootstrap(2, s, one_sided=True, max_draws=6399, thresholds=(first.p_one, 0.5))
    assert ext.draws > 399 and ext.draws in (1599, 6399)
    assert not near_threshold(first.p_one, 399, (0.9,))
    far = d.bootstrap(2, s, one_sided=True, max_draws=6399, thresholds=(0.999, 0.9999))
    assert far.draws == 399 and far.p_one == first.p_one
    # the extended p is the first 399 draws' p refined: it stays within MC error of it
    _close(first.p_one, 399, ext.p_one, ext.draws)


def test_g_star_alone_never_builds_the_crossed_effects_and_the_bootstrap_is_unchanged():
    """The crossed fixed effects (an L x L pseudo-inverse, L the crossed levels) are built on
    the first bootstrap only: a design asked for G* alone (wild_bootstrap_draws 0) never
    builds them, and a bootstrap after G* gives the p of a design that bootstrapped first."""
    from lookahead.stats.wild import PartialledDesign

    y, x, codes, cl = _arrays(panel(4))
    s = ProtocolSettings.with_defaults(wild_bootstrap_draws=199, wild_bootstrap_seed=5)
    lazy = PartialledDesign(y, x, codes, cl)
    g = lazy.g_star(2)
    assert "_crossed" not in vars(lazy) and math.isfinite(g)
    got = lazy.bootstrap(2, s, one_sided=True, max_draws=199)
    assert vars(lazy)["_crossed"] is not None  # the period effect is crossed with the entity clusters
    want = PartialledDesign(y, x, codes, cl).bootstrap(2, s, one_sided=True, max_draws=199)
    assert (got.p_one, got.p_two, got.g_star, got.draws) == (want.p_one, want.p_two, want.g_star, want.draws) and got.g_star == g


def test_mde_reads_the_bootstrap_and_matches_the_t_rule_at_many_clusters():
    """The mde column is (q*_0.95 - q*_0.20) x SE from the bootstrap's t distribution; with
    many evenly informative clusters that is close to (t_0.95 + t_0.80) x SE."""
    from scipy import stats as st

    df = panel(21, n_entities=200, n_periods=4, per_cell=2)
    req = FitRequest(
        spec="detection",
        sample="pre",
        outcome="outcome",
        regressors=("mu_hat", "lap", "mu_hat:lap"),
        one_sided_terms=("mu_hat:lap",),
        wild_terms=("mu_hat:lap",),
        wild=ProtocolSettings.with_defaults(wild_bootstrap_draws=1999),
    )
    row = fit_fe(df, req).set_index("term").loc["mu_hat:lap"]
    analytic = (st.t.ppf(0.95, row["df"]) + st.t.ppf(0.80, row["df"])) * row["std_error"]
    assert float(row["mde"]) == pytest.approx(analytic, rel=0.12)
    off = fit_fe(df, FitRequest(**{**req.__dict__, "wild": ProtocolSettings.with_defaults(wild_bootstrap_draws=0)}))
    assert float(off.set_index("term").loc["mu_hat:lap", "mde"]) == pytest.approx(analytic, rel=1e-9)


def test_an_interaction_whose_main_effect_is_dropped_is_not_estimable():
    """mu_hat identical to LAP: one main effect is collinear and dropped; the interaction
    would then be the slope on mu_hat squared, so beta_3 is not estimable, never renamed."""
    df = panel(5)
    df["mu_hat"] = df["lap"]
    res = fit_fe(
        df,
        FitRequest(
            spec="detection",
            sample="pre",
            outcome="outcome",
            regressors=("mu_hat", "lap", "mu_hat:lap"),
            one_sided_terms=("mu_hat:lap",),
            wild_terms=("mu_hat:lap",),
            wild=ProtocolSettings.with_defaults(wild_bootstrap_draws=99),
        ),
    ).set_index("term")
    assert pd.isna(res.loc["mu_hat:lap", "estimate"]) and pd.isna(res.loc["mu_hat:lap", "p_wild_one_sided"])
    assert "not estimable: mu_hat:lap: its main effect" in res.loc["mu_hat:lap", "warning"]


def thin_panel(seed: int, n_entities: int, n_periods: int, per_period: float, effect: float = 0.1) -> pd.DataFrame:
    """An unbalanced panel with about `per_period` entities in each period: each entity
    is observed in a random subset of periods (one row per observed cell)."""
    rng = np.random.default_rng(seed)
    keep = rng.uniform(size=(n_entities, n_periods)) < per_period / n_entities
    e, t = np.nonzero(keep)
    n = len(e)
    mu = rng.choice([-1.0, 1.0], n)
    lap = rng.uniform(0, 1, n) * (1 + (e < 2))
    y = (
        rng.normal(0, 0.5, n_entities)[e]
        + rng.normal(0, 0.5, n_periods)[t]
        + effect * mu * lap
        + rng.normal(0, 0.6, n_entities)[e] * rng.normal(size=n)
        + rng.normal(size=n)
    )
    return pd.DataFrame({"outcome": y, "mu_hat": mu, "lap": lap, "entity_num": e, "period_num": t})


#: (entities, periods, entities per period): thin designs (15 entities x 120 periods with
#: about 4 per period; about 10 per period) and the balanced G = 30 and G = 100
THIN = [(15, 120, 4.0), (30, 40, 10.0), (30, 12, 30.0), (100, 6, 100.0)]


@pytest.mark.parametrize("n_entities,n_periods,per_period", THIN)
@pytest.mark.parametrize("seed", [1, 2])
def test_fast_wild_equals_a_dense_dummies_wcr_with_few_entities_per_period(seed, n_entities, n_periods, per_period):
    """Period effects crossed with entity clusters, few entities per period: the fast p
    equals the dense-dummies WCR (reference_wcr above: dummies, restricted OLS under H0,
    Rademacher weights, refit per draw) within 3 Monte Carlo SEs, one- and two-sided.
    Without re-projecting the draws off the period effects the fast p fell below the
    dense one: at 4 entities per period (seed 2) one-sided 0.052 against 0.077, two-sided
    z -9.6 in these SEs; at G = 30, seed 2, two-sided z -4.3."""
    from lookahead.stats.wild import PartialledDesign

    df = thin_panel(seed, n_entities, n_periods, per_period)
    y, x, codes, cl = _arrays(df)
    b = 9999
    fast = PartialledDesign(y, x, codes, cl).bootstrap(
        2,
        ProtocolSettings.with_defaults(wild_bootstrap_draws=b, wild_bootstrap_weights="rademacher", wild_bootstrap_seed=seed),
        one_sided=True,
        max_draws=b,
    )
    _, p2_ref, p1_ref = reference_wcr(df, [["mu_hat"], ["lap"], ["mu_hat", "lap"]], 2, b, seed + 500)
    for p_fast, p_ref in ((fast.p_one, p1_ref), (fast.p_two, p2_ref)):
        p = (p_fast + p_ref) / 2
        se = math.sqrt(max(p * (1 - p), 1e-4) * 2 / b)
        assert abs(p_fast - p_ref) <= 3 * se, (p_fast, p_ref, se)


def _split_panel(seed: int, n_entities: int, n_periods: int, n_rows: int, blocks: int) -> pd.DataFrame:
    """Rows at random (entity, period) cells; with blocks > 1 the entities and periods
    fall into that many groups that share no row (the rows tie levels into `blocks`
    connected components, each adding a direction to the crossed Gram matrix's null space)."""
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n_entities, n_rows)
    block = e * blocks // n_entities
    per_block = n_periods // blocks
    t = block * per_block + rng.integers(0, per_block, n_rows)
    df = pd.DataFrame({"entity_num": e, "period_num": t})
    df["mu_hat"] = rng.choice([-1.0, 1.0], n_rows)
    df["lap"] = rng.uniform(0, 1, n_rows)
    df["outcome"] = rng.normal(0, 0.5, n_entities)[e] + 0.1 * df["mu_hat"] * df["lap"] + rng.normal(size=n_rows)
    return df


#: (entities, periods, rows, components): the crossed side factored (periods <= entities),
#: the nested side factored through its Schur complement (periods > entities, as in the
#: difference regression's period x half), each with one and with several components
TWO_WAY = [(30, 12, 400, 1), (12, 30, 400, 1), (40, 40, 300, 2), (10, 60, 400, 2), (60, 150, 900, 3)]


@pytest.mark.parametrize("n_entities,n_periods,n_rows,blocks", TWO_WAY)
def test_crossed_effects_operator_equals_the_pseudo_inverse_and_a_dense_projection(n_entities, n_periods, n_rows, blocks):
    """The re-projection operator [w_h'(P_D (u~ * e_g))_h]_{h,g} by the Cholesky route on
    the Gram matrix restricted off its null space (one level per connected component
    dropped) equals, to 1e-10 of its largest entry, (a) the route it replaced, Omega S^+
    Gamma with S^+ by numpy's pinv, and (b) an independent dense computation: the rows x
    dummies projection P_D by numpy lstsq, summed per cluster. The solve itself is S^+ on
    any right-hand side, also one outside S's range."""
    from lookahead.stats.wild import PartialledDesign, _TwoWaySolve

    df = _split_panel(n_entities + n_periods, n_entities, n_periods, n_rows, blocks)
    y, x, codes, cl = _arrays(df)
    design = PartialledDesign(y, x, codes, cl)
    crossed = design._crossed
    assert isinstance(crossed.solver, _TwoWaySolve) and crossed.solver.n_components == blocks
    assert crossed.solver.factor_crossed == (n_periods <= n_entities)
    w = design.x @ design.xtx_inv[2]
    u = design.y - design.x[:, :2] @ np.linalg.lstsq(design.x[:, :2], design.y, rcond=None)[0]
    left, right = crossed.operator(w, u)
    got = left if right is None else left @ right
    ent, per = pd.factorize(codes[0])[0], crossed.levels[:, 0]  # the design's own level order
    n, a, b, G = len(y), int(ent.max()) + 1, int(per.max()) + 1, design.n_groups
    counts = np.zeros((a, b))
    np.add.at(counts, (ent, per), 1.0)
    gram = np.diag(counts.sum(0)) - counts.T @ (counts / counts.sum(1)[:, None])
    by_pinv = crossed._sums(w).T @ (np.linalg.pinv(gram, hermitian=True) @ crossed._sums(u))
    dummies = np.zeros((n, a + b))
    dummies[np.arange(n), ent] = 1.0
    dummies[np.arange(n), a + per] = 1.0
    z = np.zeros((n, G))
    z[np.arange(n), design.cluster] = u
    wz = np.zeros((n, G))
    wz[np.arange(n), design.cluster] = w
    dense = wz.T @ (dummies @ np.linalg.lstsq(dummies, z, rcond=None)[0])
    scale = float(np.abs(dense).max())
    assert scale > 0
    assert np.abs(got - by_pinv).max() <= 1e-10 * scale
    assert np.abs(got - dense).max() <= 1e-10 * scale
    # and the solve is S^+ itself, also on a right-hand side outside S's range
    rhs = np.random.default_rng(blocks).normal(size=(b, 3))
    pinv_rhs = np.linalg.pinv(gram, hermitian=True) @ rhs
    assert np.abs(crossed.solver.solve(rhs) - pinv_rhs).max() <= 1e-10 * float(np.abs(pinv_rhs).max())


def test_the_cholesky_route_gives_the_pinv_routes_bootstrap(monkeypatch):
    """The whole bootstrap (p-values, draws, MDE) is the one the pseudo-inverse route
    gives, the route a design falls back to when the restricted block is not positive
    definite in floating point (forced here)."""
    from lookahead.stats import wild

    df = thin_panel(3, 15, 120, 4.0)
    y, x, codes, cl = _arrays(df)
    s = ProtocolSettings.with_defaults(wild_bootstrap_draws=999, wild_bootstrap_seed=11)
    fast = wild.PartialledDesign(y, x, codes, cl)
    got = fast.bootstrap(2, s, one_sided=True)
    assert isinstance(fast._crossed.solver, wild._TwoWaySolve)

    def not_positive_definite(*_a, **_k):
        raise np.linalg.LinAlgError("not positive definite")

    monkeypatch.setattr(wild, "_TwoWaySolve", not_positive_definite)
    slow = wild.PartialledDesign(y, x, codes, cl)
    want = slow.bootstrap(2, s, one_sided=True)
    assert isinstance(slow._crossed.solver, wild._GramSolve)
    assert (got.p_one, got.p_two, got.draws, got.g_star) == (want.p_one, want.p_two, want.draws, want.g_star)
    assert got.mde == pytest.approx(want.mde, rel=1e-9, abs=1e-12)
