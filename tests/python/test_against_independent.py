"""lookahead.stats.fit_fe against implementations that share no code with pyfixest.

Reference 1 (written here from the formula): OLS with explicit intercept and entity /
period dummies via numpy least squares; CRV1 sandwich with reghdfe's correction
G/(G-1)*(N-1)/(N-K), K = slopes + rank([1, dummies of the FE not nested in the
cluster]); p from t(G-1). Singletons are removed iteratively first, as reghdfe does.
Reference 2: linearmodels PanelOLS (coefficients) and statsmodels OLS with dummies
(cluster-robust, rescaled from its K = all columns to reghdfe's K).
Reference 3: statsmodels HAC (Newey-West, use_correction, use_t) for a single entity.

Data: two real public panels shipped by PyPI packages (linearmodels' wage_panel,
statsmodels' grunfeld) and synthetic fixtures shaped like the protocol's panel
(unbalanced, singletons, interaction term, clustering by entity / period / date)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from paper_reference import drop_singletons, dummies  # the shared independent helpers
from scipy import stats

from lookahead.stats import FitRequest, fit_fe

REL = 1e-6


# ---------------------------------------------------------------- reference 1


def design(df: pd.DataFrame, xs: list[str], fes: list[str]) -> np.ndarray:
    cols = []
    for x in xs:
        parts = x.split(":")
        v = np.ones(len(df))
        for p in parts:
            v = v * df[p].to_numpy(float)
        cols.append(v)
    return np.column_stack(cols + [np.ones(len(df))] + [dummies(df[f])[:, 1:] for f in fes])


def dummies_ols(df: pd.DataFrame, y: str, xs: list[str], fes: list[str], cluster: str | None):
    """(beta, se, p_two, K, N, G) for the slope terms, reghdfe conventions."""
    df = drop_singletons(df, fes) if fes else df
    X = design(df, xs, fes)
    Y = df[y].to_numpy(float)
    bread = np.linalg.inv(X.T @ X)  # drop-first dummies: full column rank
    beta = bread @ (X.T @ Y)
    u = Y - X @ beta
    N, k = len(df), len(xs)
    if cluster is None:
        meat = (X * u[:, None]).T @ (X * u[:, None])
        G = None
    else:
        G = df[cluster].nunique()
        S = pd.DataFrame(X * u[:, None]).groupby(df[cluster].to_numpy()).sum().to_numpy()
        meat = S.T @ S
    nested = [f for f in fes if cluster is not None and df.groupby(f)[cluster].nunique().max() == 1]
    nonnested = [f for f in fes if f not in nested]
    Z = np.column_stack([np.ones(N)] + [dummies(df[f]) for f in nonnested])
    K = k + np.linalg.matrix_rank(Z.T @ Z)  # = rank(Z): 1 + levels - redundant levels
    adj = (N - 1) / (N - K) * G / (G - 1) if G else N / (N - K)
    V = bread @ meat @ bread * adj
    se = np.sqrt(np.diag(V))[:k]
    dof = (G - 1) if G else (N - K)
    t = beta[:k] / se
    return beta[:k], se, 2 * stats.t.sf(np.abs(t), dof), K, N, G


def ours(df, y, xs, cluster="entity", fes=("entity_num", "period_num")):
    return fit_fe(df, FitRequest(spec="s", sample="pre", outcome=y, regressors=xs, fixed_effects=fes, cluster=cluster))


def assert_same(res: pd.DataFrame, ref, rel=REL):
    beta, se, p, _K, N, G = ref
    np.testing.assert_allclose(res["estimate"].astype(float), beta, rtol=rel)
    np.testing.assert_allclose(res["std_error"].astype(float), se, rtol=rel)
    np.testing.assert_allclose(res["p_two_sided"].astype(float), p, rtol=1e-5, atol=1e-12)
    assert int(res["n_obs"].iloc[0]) == N
    if G is not None:
        assert int(res["n_clusters"].iloc[0]) == G


# ---------------------------------------------------------------- real panels


@pytest.fixture(scope="module")
def wage() -> pd.DataFrame:
    from linearmodels.datasets import wage_panel

    return wage_panel.load().rename(columns={"nr": "entity_num", "year": "period_num"})


@pytest.fixture(scope="module")
def grunfeld() -> pd.DataFrame:
    import statsmodels.api as sm

    g = sm.datasets.grunfeld.load_pandas().data
    g["entity_num"] = pd.factorize(g["firm"], sort=True)[0]
    g["period_num"] = g["year"].astype(int)
    return g


WAGE_X = ["expersq", "union", "married", "hours"]


def test_wage_panel_two_way_fe_cluster_entity_matches_dummies_ols(wage):
    res = ours(wage, "lwage", WAGE_X)
    ref = dummies_ols(wage, "lwage", WAGE_X, ["entity_num", "period_num"], "entity_num")
    assert ref[3] == len(WAGE_X) + wage["period_num"].nunique()  # K = k + T: entity nested
    assert_same(res, ref)


def test_wage_panel_coefficients_match_linearmodels_panelols(wage):
    from linearmodels import PanelOLS

    p = wage.set_index(["entity_num", "period_num"])
    lm = PanelOLS(p["lwage"], p[WAGE_X], entity_effects=True, time_effects=True).fit(cov_type="clustered", cluster_entity=True)
    res = ours(wage, "lwage", WAGE_X)
    np.testing.assert_allclose(res["estimate"].astype(float), lm.params[WAGE_X].to_numpy(), rtol=REL)


def test_wage_panel_se_match_statsmodels_cluster_after_aligning_k(wage):
    """statsmodels counts every dummy in K; rescale to reghdfe's K and compare.

    On the first 150 workers (1,200 rows): a dense 160-column QR keeps the test fast."""
    import statsmodels.api as sm

    wage = wage[wage["entity_num"].isin(sorted(wage["entity_num"].unique())[:150])].reset_index(drop=True)
    X = pd.DataFrame(design(wage, WAGE_X, ["entity_num", "period_num"]))
    fit = sm.OLS(wage["lwage"].to_numpy(float), X).fit(
        method="qr", cov_type="cluster", cov_kwds={"groups": wage["entity_num"].to_numpy()}
    )
    N, k_full = len(wage), X.shape[1]
    k_reghdfe = len(WAGE_X) + wage["period_num"].nunique()
    se_sm = fit.bse.to_numpy()[: len(WAGE_X)] * np.sqrt((N - k_full) / (N - k_reghdfe))
    res = ours(wage, "lwage", WAGE_X)
    np.testing.assert_allclose(res["std_error"].astype(float), se_sm, rtol=REL)
    np.testing.assert_allclose(res["estimate"].astype(float), fit.params.to_numpy()[:4], rtol=REL)


@pytest.mark.parametrize("cluster,col", [("period", "period_num"), ("none", None)])
def test_wage_panel_other_vcov(wage, cluster, col):
    res = ours(wage, "lwage", WAGE_X, cluster=cluster)
    ref = dummies_ols(wage, "lwage", WAGE_X, ["entity_num", "period_num"], col)
    assert_same(res, ref)


def test_grunfeld_few_clusters_matches_and_warns(grunfeld):
    xs = ["value", "capital"]
    res = ours(grunfeld, "invest", xs)
    ref = dummies_ols(grunfeld, "invest", xs, ["entity_num", "period_num"], "entity_num")
    assert_same(res, ref)
    assert "only 11 clusters" in res["warning"].iloc[0]


# ---------------------------------------------------------------- synthetic panels


def synthetic_panel(seed: int, n_entities: int = 30, n_periods: int = 10) -> pd.DataFrame:
    """Unbalanced panel like the protocol's: several rows per (entity, month), daily dates."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(n_entities):
        for t in range(n_periods):
            for _ in range(rng.integers(0, 5)):
                rows.append((e, t, int(rng.integers(0, 20))))
    df = pd.DataFrame(rows, columns=["entity_num", "period_num", "day"])
    df["target_date"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(df["period_num"] * 30 + df["day"], "D")
    n = len(df)
    ent = rng.normal(size=n_entities)[df["entity_num"]]
    per = rng.normal(size=n_periods)[df["period_num"]]
    day = rng.normal(size=df["target_date"].nunique())[pd.factorize(df["target_date"])[0]]
    df["mu_hat"] = rng.choice([-1.0, 1.0], n)
    df["lap"] = rng.beta(2, 3, n) + 0.3 * ent
    df["ud"] = rng.uniform(-1, 1, n)
    df["outcome"] = (
        0.2 * df["mu_hat"]
        + 0.1 * df["lap"]
        + 0.5 * df["mu_hat"] * df["lap"]
        + 0.3 * df["ud"]
        + ent
        + per
        + 0.5 * day
        + rng.normal(size=n)
    )
    # a singleton: an entity seen once, and a period seen once
    extra = df.iloc[[0, 1]].copy()
    extra["entity_num"] = [n_entities, 0]
    extra["period_num"] = [0, n_periods]
    return pd.concat([df, extra], ignore_index=True)


DET = ["mu_hat", "lap", "mu_hat:lap"]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(
    "cluster,col", [("entity", "entity_num"), ("period", "period_num"), ("date", "target_date"), ("none", None)]
)
def test_synthetic_detection_spec_all_cluster_settings(seed, cluster, col):
    df = synthetic_panel(seed)
    res = ours(df, "outcome", DET, cluster=cluster)
    ref = dummies_ols(df, "outcome", DET, ["entity_num", "period_num"], col)
    assert_same(res, ref)
    assert int(res["n_singletons"].iloc[0]) == len(df) - ref[4] > 0


def test_synthetic_validation_spec_matches():
    df = synthetic_panel(7, n_entities=25)
    res = ours(df, "outcome", ["ud"])
    assert_same(res, dummies_ols(df, "outcome", ["ud"], ["entity_num", "period_num"], "entity_num"))


def test_p_two_sided_is_pyfixest_pr_renamed():
    """Our t(G-1) p equals pyfixest's own 'Pr(>|t|)' column (only renamed)."""
    import pyfixest as pf

    df = drop_singletons(synthetic_panel(4), ["entity_num", "period_num"]).copy()
    df["mu_hat_x_lap"] = df["mu_hat"] * df["lap"]
    from pyfixest.demeaners import MapDemeaner

    from lookahead.stats.fe_regression import FIXEF_TOL

    fit = pf.feols(
        "outcome ~ mu_hat + lap + mu_hat_x_lap | entity_num + period_num",
        data=df,
        vcov={"CRV1": "entity_num"},
        demeaner=MapDemeaner(fixef_tol=FIXEF_TOL),
    )
    tidy = fit.tidy()
    res = ours(df, "outcome", DET)
    np.testing.assert_allclose(res["p_two_sided"].astype(float), tidy["Pr(>|t|)"].to_numpy(), rtol=1e-8)
    np.testing.assert_allclose(res["std_error"].astype(float), tidy["Std. Error"].to_numpy(), rtol=1e-8)


# ---------------------------------------------------------------- single entity: Newey-West


@pytest.mark.parametrize("lag", [1, 3, 6])
def test_single_entity_newey_west_matches_statsmodels_hac(lag):
    import statsmodels.api as sm

    rng = np.random.default_rng(11)
    n = 240
    df = pd.DataFrame(
        {
            "entity_num": 0,
            "period_num": np.repeat(np.arange(24), 10),
            "target_date": pd.date_range("2019-01-01", periods=n, freq="D"),
        }
    )
    e = np.zeros(n)
    for i in range(1, n):  # autocorrelated errors, the case Newey-West is for
        e[i] = 0.6 * e[i - 1] + rng.normal()
    df["mu_hat"] = rng.choice([-1.0, 1.0], n)
    df["lap"] = rng.uniform(0, 1, n)
    df["outcome"] = 0.4 * df["mu_hat"] * df["lap"] + e
    df = df.sample(frac=1.0, random_state=0)  # the wrapper must sort by date itself
    res = fit_fe(df, FitRequest(spec="s", sample="pre", outcome="outcome", regressors=DET, nw_lag=lag))
    srt = df.sort_values("target_date")
    X = pd.DataFrame(design(srt, DET, ["period_num"]))
    sm_fit = sm.OLS(srt["outcome"].to_numpy(float), X).fit(
        cov_type="HAC", cov_kwds={"maxlags": lag, "use_correction": True}, use_t=True
    )
    np.testing.assert_allclose(res["estimate"].astype(float), sm_fit.params.to_numpy()[:3], rtol=REL)
    np.testing.assert_allclose(res["std_error"].astype(float), sm_fit.bse.to_numpy()[:3], rtol=REL)
    np.testing.assert_allclose(res["p_two_sided"].astype(float), sm_fit.pvalues.to_numpy()[:3], rtol=1e-6)
    assert res["fixed_effects"].iloc[0] == "period_num"
    assert res["vcov"].iloc[0].startswith(f"NW(lag={lag}")
    assert "single entity" in res["warning"].iloc[0]
