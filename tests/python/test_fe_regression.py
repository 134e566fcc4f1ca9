"""The pyfixest wrapper: one-sided p, table shape, singletons, collinear drops, warnings,
the single-entity path, user errors, and NULLs surviving the trip through DuckDB."""

from __future__ import annotations

import gc
import math

import duckdb
import numpy as np
import pandas as pd
import pytest

from lookahead.stats import RESULT_COLUMNS, FitRequest, RegressionInputError, fit_fe, one_sided_p
from lookahead.stats.fe_regression import newey_west_default_lag

DET = ("mu_hat", "lap", "mu_hat:lap")


def panel(n_entities: int = 25, n_periods: int = 6, per_cell: int = 3, seed: int = 0, beta3: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    idx = [(e, t) for e in range(n_entities) for t in range(n_periods) for _ in range(per_cell)]
    df = pd.DataFrame(idx, columns=["entity_num", "period_num"])
    n = len(df)
    df["target_date"] = pd.Timestamp("2021-01-01") + pd.to_timedelta(df["period_num"] * 31 + rng.integers(0, 28, n), "D")
    df["mu_hat"] = rng.choice([-1.0, 1.0], n)
    df["lap"] = rng.uniform(0, 1, n)
    df["ud"] = rng.uniform(-1, 1, n)
    df["outcome"] = beta3 * df["mu_hat"] * df["lap"] + rng.normal(size=n)
    return df


def fit(df, regressors=DET, **kw) -> pd.DataFrame:
    kw.setdefault("one_sided_terms", ("mu_hat:lap",))
    return fit_fe(df, FitRequest(spec="detection", sample="pre", outcome="outcome", regressors=regressors, **kw))


# ---------------------------------------------------------------- one-sided p


@pytest.mark.parametrize(
    "t,p2,expected",
    [
        (2.0, 0.06, 0.03),  # t > 0: p/2
        (-2.0, 0.06, 0.97),  # t < 0: 1 - p/2
        (0.0, 1.0, 0.5),  # t = 0: 1 - p/2
        (1e-9, 0.999, 0.4995),
    ],
)
def test_one_sided_p_protocol_rule(t, p2, expected):
    assert one_sided_p(t, p2) == pytest.approx(expected, abs=1e-12)


def test_one_sided_p_missing_is_nan():
    assert math.isnan(one_sided_p(float("nan"), 0.5))
    assert math.isnan(one_sided_p(1.0, float("nan")))


def test_one_sided_p_matches_t_distribution_upper_tail():
    from scipy import stats

    df = panel(beta3=0.5, seed=3)
    res = fit(df)
    row = res[res["term"] == "mu_hat:lap"].iloc[0]
    g = int(row["n_clusters"])
    assert row["p_one_sided"] == pytest.approx(stats.t.sf(float(row["t"]), g - 1), rel=1e-9)


# ---------------------------------------------------------------- table shape


def test_columns_and_one_row_per_term():
    res = fit(panel())
    assert tuple(res.columns) == RESULT_COLUMNS
    assert list(res["term"]) == list(DET)
    assert "Std. Error" not in res.columns and "Pr(>|t|)" not in res.columns
    # p_one_sided only where the test is one-sided (beta_3)
    assert res.loc[res["term"] != "mu_hat:lap", "p_one_sided"].isna().all()
    assert res.loc[res["term"] == "mu_hat:lap", "p_one_sided"].notna().all()
    assert (res["fixed_effects"] == "entity_num + period_num").all()
    assert res["vcov"].iloc[0].startswith("CRV1(entity_num")
    assert int(res["n_clusters"].iloc[0]) == 25
    assert res["warning"].iloc[0] == ""


def test_singletons_counted_and_dropped():
    df = panel()
    lone = df.iloc[[0]].copy()
    lone["entity_num"] = 999  # an entity seen once: a singleton
    res = fit(pd.concat([df, lone], ignore_index=True))
    assert int(res["n_singletons"].iloc[0]) == 1
    assert int(res["n_obs"].iloc[0]) == len(df)
    assert "1 singleton" in res["warning"].iloc[0]


def test_collinear_term_reported_and_null():
    df = panel()
    df["lap2"] = 2.0 * df["lap"]
    res = fit(df, regressors=("mu_hat", "lap", "lap2"), one_sided_terms=())
    assert res["dropped_terms"].iloc[0] == "lap2"
    assert pd.isna(res.loc[res["term"] == "lap2", "estimate"]).all()
    assert "collinear term(s) dropped: lap2" in res["warning"].iloc[0]


def test_constant_lap_makes_beta3_unestimable_not_a_crash():
    df = panel()
    df["lap"] = 0.0
    res = fit(df)
    b3 = res[res["term"] == "mu_hat:lap"].iloc[0]
    assert pd.isna(b3["estimate"]) and pd.isna(b3["p_one_sided"])
    assert "mu_hat:lap" in b3["dropped_terms"]


def test_all_terms_collinear_gives_rows_with_reason():
    df = panel()
    df["lap"] = 1.0
    res = fit(df, regressors=("lap",), one_sided_terms=())
    assert len(res) == 1 and pd.isna(res["estimate"].iloc[0])
    assert "not estimable" in res["warning"].iloc[0]


def test_empty_sample():
    res = fit(panel().iloc[0:0])
    assert len(res) == 3 and (res["n_obs"] == 0).all()
    assert "no observations" in res["warning"].iloc[0]


def test_rows_with_missing_values_dropped_and_noted():
    df = panel()
    df.loc[:4, "lap"] = np.nan
    res = fit(df)
    assert int(res["n_obs"].iloc[0]) == len(df) - 5
    assert "5 row(s) with a missing value" in res["warning"].iloc[0]


# ---------------------------------------------------------------- clusters and vcov


def test_few_clusters_warn():
    res = fit(panel(n_entities=8))
    assert "only 8 clusters (< 20)" in res["warning"].iloc[0]


def test_twenty_clusters_do_not_warn():
    assert "clusters" not in fit(panel(n_entities=20))["warning"].iloc[0]


def test_cluster_by_date_counts_dates():
    df = panel()
    res = fit(df, cluster="date")
    assert int(res["n_clusters"].iloc[0]) == df["target_date"].nunique()
    assert res["vcov"].iloc[0].startswith("CRV1(target_date")


def test_cluster_none_is_hc1():
    res = fit(panel(), cluster="none")
    assert res["vcov"].iloc[0].startswith("HC1") and res["n_clusters"].isna().all()


def test_single_entity_drops_entity_fe_and_uses_newey_west():
    df = panel(n_entities=1, n_periods=30, per_cell=4)
    res = fit(df)
    n = len(df)
    lag = newey_west_default_lag(n)
    assert (res["fixed_effects"] == "period_num").all()
    assert res["vcov"].iloc[0] == f"NW(lag={lag}, Bartlett; N/(N-K))"
    assert res["n_clusters"].isna().all()
    assert f"lag {lag}" in res["warning"].iloc[0] and "single entity" in res["warning"].iloc[0]


def test_newey_west_default_lag_rule():
    assert newey_west_default_lag(100) == 4
    assert newey_west_default_lag(1000) == int(np.floor(4 * 10 ** (2 / 9)))
    assert newey_west_default_lag(3) == 1


# ---------------------------------------------------------------- user errors


def test_bad_cluster_setting_names_it():
    with pytest.raises(RegressionInputError, match="setting 'cluster': 'firm'"):
        fit(panel(), cluster="firm")


def test_missing_column_names_it():
    with pytest.raises(RegressionInputError, match=r"lacks column\(s\) \['lap'\]"):
        fit(panel().drop(columns="lap"))


def test_non_numeric_value_names_column_and_row():
    df = panel()
    df["mu_hat"] = df["mu_hat"].astype(object)
    df.loc[7, "mu_hat"] = "up"
    with pytest.raises(RegressionInputError, match=r"column 'mu_hat' is not numeric \(row index 7: 'up'\)"):
        fit(df)


# ---------------------------------------------------------------- DuckDB round trip


def test_missing_estimates_are_null_in_duckdb():
    df = panel()
    df["lap"] = 0.0
    res = fit(df)
    con = duckdb.connect()
    con.register("res", res)
    nulls = con.execute(
        "select count(*) from res where term = 'mu_hat:lap' and estimate is null and p_one_sided is null"
    ).fetchone()[0]
    nans = con.execute("select count(*) from res where isnan(estimate)").fetchone()[0]
    assert nulls == 1 and nans == 0


def test_single_cluster_is_not_estimable_with_reason():
    res = fit(panel(n_periods=1, per_cell=10), cluster="period")
    assert res["estimate"].isna().all()
    assert "only one period_num cluster" in res["warning"].iloc[0]


def test_all_singleton_sample_is_not_estimable_instead_of_aborting():
    """A sparse daily panel where every period has one row: pyfixest's demeaner would
    abort the process; fit_fe must return NULL estimates with the reason."""
    import numpy as np
    import pandas as pd

    from lookahead.stats.fe_regression import FitRequest, fit_fe

    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame(
        {
            "outcome": rng.normal(size=n),
            "ud": rng.normal(size=n),
            "entity_num": rng.integers(0, 20, size=n),
            "period_num": np.arange(n),
        }
    )
    out = fit_fe(df, FitRequest("validation_pooled", "pre", "outcome", ["ud"]))
    assert out["estimate"].isna().all()
    assert "singleton" in out["warning"].iloc[0] and "not estimable" in out["warning"].iloc[0]


def test_one_demeaning_tolerance_for_every_regression():
    """One tolerance (<= 1e-10), declared once in fe_regression, used by every pyfixest
    fit the package makes (protocol, paper through the same wrapper, bootstrap baseline)."""
    import re
    from pathlib import Path

    import lookahead
    from lookahead.paper import fit as paper_fit
    from lookahead.stats import fe_regression

    assert fe_regression.FIXEF_TOL <= 1e-10
    assert paper_fit.FIXEF_TOL is fe_regression.FIXEF_TOL
    root = Path(lookahead.__file__).parent
    calls = []
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"pf\.feols\((.*?)\)\n", text, flags=re.S):
            calls.append((path.name, m.group(1)))
        assert not re.search(r"FIXEF_TOL\s*=", text) or path.name == "fe_regression.py", path
    assert calls, "no pyfixest fit found"
    for name, args in calls:
        assert "demeaner=MapDemeaner(fixef_tol=FIXEF_TOL)" in args, name


def test_a_fit_leaves_no_model_data_behind():
    """fit_fe empties the pyfixest model it fitted (lookahead.stats.fe_regression._release):
    no Feols with its arrays may outlive the call, even with the cycle collector off (as
    it effectively is in a long dbt build, where it runs rarely)."""
    from pyfixest.estimation.models.feols_ import Feols

    df = panel()
    gc.collect()
    gc.disable()
    try:
        fit(df)
        alive = [o for o in gc.get_objects() if isinstance(o, Feols) and vars(o)]
    finally:
        gc.enable()
    assert alive == []
