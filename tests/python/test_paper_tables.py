"""Paper Tables I-VI against an independent numpy OLS with explicit dummies (paper_reference)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from paper_reference import ols_dummies, standardize_by_hand
from scipy import stats

from lookahead.config import StudyConfigError, load_study
from lookahead.paper import tables as T
from lookahead.paper.synthetic import make_panel
from lookahead.stats.fe_regression import RegressionInputError as PaperSpecError
from lookahead.stats.verdict import fmt_p

FE = ["entity_num", "period_num"]
TOL = 1e-8


@pytest.fixture(scope="module")
def pre() -> pd.DataFrame:
    df = make_panel(n_rows=700, n_entities=60, n_dates=30, delta=3.0, seed=11, sample="pre")
    # moderator that varies within entity (as the paper's Small does)
    df["small"] = (np.random.default_rng(5).uniform(size=len(df)) < 0.3).astype(int)
    # a few missing confidences: Table IV must drop exactly those rows
    df.loc[df.index[:7], "stated_confidence"] = np.nan
    return df


@pytest.fixture(scope="module")
def post() -> pd.DataFrame:
    return make_panel(n_rows=500, n_entities=50, n_dates=25, delta=0.0, seed=12)


def _check(fit, ref, names, with_se=True):
    assert fit.n_obs == ref["n"]
    est = np.array([fit.estimate[n] for n in names])
    np.testing.assert_allclose(est, ref["beta"], rtol=0, atol=TOL * max(1, np.abs(ref["beta"]).max()))
    assert fit.r2 == pytest.approx(ref["r2"], abs=1e-8)
    if with_se:
        se = np.array([fit.std_error[n] for n in names])
        np.testing.assert_allclose(se, ref["se"], rtol=1e-6)
        np.testing.assert_allclose([fit.p[n] for n in names], ref["p"], rtol=1e-5, atol=1e-12)
        assert fit.n_clusters == ref["G"]


@pytest.mark.parametrize("cluster,col", [("date", "target_date"), ("entity", "entity_num")])
@pytest.mark.parametrize("measure", ["mink", "recall"])
def test_table2_matches_dummies_ols(pre, cluster, col, measure):
    s = T.PaperSections.with_defaults(paper_cluster=cluster, lap_measure=measure)
    tab = T.table2(pre, s)
    lap = s.lap
    r1 = ols_dummies(pre, "outcome", [["mu_hat"]], FE, col)
    r2 = ols_dummies(pre, "outcome", [["mu_hat"], [lap], ["mu_hat", lap]], FE, col)
    _check(tab.columns[0], r1, ["LLM"])
    _check(tab.columns[1], r2, ["LLM", "LAP", "LLM x LAP"])
    assert tab.columns[1].vcov == f"CRV1 by {cluster}"
    long = tab.long(s)
    assert set(long["lap_measure"]) == {measure}
    assert set(long["mink_mean"].dropna()) == ({"geometric"} if measure == "mink" else set())


def test_table2_economic_magnitudes(pre):
    s = T.PaperSections.with_defaults(lap_measure="mink")
    tab = T.table2(pre, s)
    m = tab.magnitudes
    used = pre.dropna(subset=["outcome", "mu_hat", "lap_mink"])
    assert m["sd_llm"] == pytest.approx(used["mu_hat"].std(ddof=1))
    assert m["sd_lap"] == pytest.approx(used["lap_mink"].std(ddof=1))
    assert m["effect_of_1sd_llm"] == pytest.approx(tab.columns[0].estimate["LLM"] * m["sd_llm"])
    assert m["effect_of_1sd_lap_on_llm_slope"] == pytest.approx(tab.columns[1].estimate["LLM x LAP"] * m["sd_lap"])
    # the paper's ratio divides by gamma (the standalone marginal effect of LLM), not by
    # gamma x SD(LLM): 0.077 / 0.210 = 36.7%, "about 37%" (0.077 / 0.197 would be 39%)
    assert m["ratio"] == pytest.approx(m["effect_of_1sd_lap_on_llm_slope"] / tab.columns[0].estimate["LLM"])
    # the paper's own numbers: 0.210 * 0.937 = 0.197 and 2.866 * 0.027 = 0.077
    assert pytest.approx(0.197, abs=5e-4) == 0.210 * 0.937
    assert pytest.approx(0.077, abs=5e-4) == 2.866 * 0.027
    assert round(100 * 0.077 / 0.210) == 37


def test_planted_interaction_is_found(pre):
    tab = T.table2(pre, T.PaperSections.with_defaults(lap_measure="mink"))
    fit = tab.columns[1]
    assert fit.estimate["LLM x LAP"] > 0 and fit.p["LLM x LAP"] < 0.05


def test_table3_double_and_triple_interactions(pre):
    s = T.PaperSections.with_defaults(lap_measure="mink", moderator_column="small")
    tab = T.table3(pre, s)
    r1 = ols_dummies(pre, "outcome", [["mu_hat"], ["small"], ["mu_hat", "small"]], FE, "target_date")
    xs = [
        ["mu_hat"],
        ["small"],
        ["mu_hat", "small"],
        ["lap_mink"],
        ["mu_hat", "lap_mink"],
        ["lap_mink", "small"],
        ["mu_hat", "lap_mink", "small"],
    ]
    r2 = ols_dummies(pre, "outcome", xs, FE, "target_date")
    _check(tab.columns[0], r1, ["LLM", "small", "LLM x small"])
    _check(tab.columns[1], r2, ["LLM", "small", "LLM x small", "LAP", "LLM x LAP", "LAP x small", "LLM x LAP x small"])


def test_table3_skipped_without_moderator_and_bad_moderator(pre):
    assert T.table3(pre, T.PaperSections.with_defaults(lap_measure="mink")) is None
    bad = pre.copy()
    bad["size_bucket"] = np.arange(len(bad)) % 3
    with pytest.raises(PaperSpecError, match="size_bucket.*binary.*row"):
        T.table3(bad, T.PaperSections.with_defaults(lap_measure="mink", moderator_column="size_bucket"))
    with pytest.raises(PaperSpecError, match="nosuch"):
        T.table3(pre, T.PaperSections.with_defaults(lap_measure="mink", moderator_column="nosuch"))


def test_table4_horse_race(pre):
    s = T.PaperSections.with_defaults(lap_measure="mink")
    tab = T.table4(pre, s)
    assert len(tab.columns) == 4
    ftp, conf, lap = "first_token_prob", "stated_confidence", "lap_mink"
    specs = [
        ([["mu_hat"], [ftp], ["mu_hat", ftp]], ["LLM", "p(first token)", "LLM x p(first token)"]),
        (
            [["mu_hat"], [lap], ["mu_hat", lap], [ftp], ["mu_hat", ftp]],
            ["LLM", "LAP", "LLM x LAP", "p(first token)", "LLM x p(first token)"],
        ),
        ([["mu_hat"], [conf], ["mu_hat", conf]], ["LLM", "Confidence", "LLM x Confidence"]),
        (
            [["mu_hat"], [lap], ["mu_hat", lap], [conf], ["mu_hat", conf]],
            ["LLM", "LAP", "LLM x LAP", "Confidence", "LLM x Confidence"],
        ),
    ]
    for fit, (xs, names) in zip(tab.columns, specs, strict=False):
        _check(fit, ols_dummies(pre, "outcome", xs, FE, "target_date"), names)
    assert tab.columns[2].n_missing == 7 and tab.columns[0].n_missing == 0


def test_table4_skips_missing_confidence(pre):
    df = pre.drop(columns=["stated_confidence"])
    tab = T.table4(df, T.PaperSections.with_defaults(lap_measure="mink"))
    assert len(tab.columns) == 2
    assert any("Confidence" in n for n in tab.notes)


def test_table5_standardized_within_each_period(pre, post):
    s = T.PaperSections.with_defaults(lap_measure="mink")
    tab = T.table5(pre, post, s)
    cols = ["outcome", "mu_hat", "lap_mink"]
    for j, df in ((0, pre), (2, post)):
        z = standardize_by_hand(df, cols)
        r_base = ols_dummies(z, "outcome_z", [["mu_hat_z"]], FE, "target_date")
        r_full = ols_dummies(z, "outcome_z", [["mu_hat_z"], ["lap_mink_z"], ["mu_hat_z", "lap_mink_z"]], FE, "target_date")
        _check(tab.columns[j], r_base, ["LLM_std"])
        _check(tab.columns[j + 1], r_full, ["LLM_std", "LAP_std", "LLM_std x LAP_std"])
    zi = T.table5_inputs(post, s)
    assert zi["outcome_std"].mean() == pytest.approx(0, abs=1e-12)
    assert zi["lap_mink_std"].std(ddof=1) == pytest.approx(1)
    assert tab.column_samples == ["pre", "pre", "post", "post"]


def test_table5_constant_variable_is_a_clear_error(pre, post):
    flat = post.assign(lap_mink=0.1)
    with pytest.raises(PaperSpecError, match="lap_mink.*no variation"):
        T.table5(pre, flat, T.PaperSections.with_defaults(lap_measure="mink"))


def test_table6_five_level_labels_run_through_table2():
    labels = T.FIVE_LEVEL_LABELS
    assert labels == {"significantly decrease": -1, "decrease": -0.5, "neutral": 0, "increase": 0.5, "significantly increase": 1}
    df = make_panel(n_rows=600, n_entities=50, n_dates=20, seed=21, sample="pre", labels=labels)
    inv = {v: k for k, v in labels.items()}
    raw = df["mu_hat"].map(inv)
    raw.iloc[:5] = raw.iloc[:5].str.upper() + "  "  # parsing is case/space insensitive
    df["mu_hat"] = T.map_forecast_labels(raw, labels)
    assert set(df["mu_hat"].unique()) == {-1.0, -0.5, 0.0, 0.5, 1.0}
    tab = T.table6(df, T.PaperSections.with_defaults(lap_measure="mink", paper_cluster="entity"))
    ref = ols_dummies(df, "outcome", [["mu_hat"], ["lap_mink"], ["mu_hat", "lap_mink"]], FE, "entity_num")
    _check(tab.columns[1], ref, ["LLM", "LAP", "LLM x LAP"])
    assert tab.name == "table6"


def test_table1_descriptives(pre):
    d = T.table1(pre, T.PaperSections.with_defaults(lap_measure="mink")).set_index("variable")
    x = pre["stated_confidence"].dropna()
    r = d.loc["Confidence"]
    assert r["n"] == len(x) == len(pre) - 7
    assert r["mean"] == pytest.approx(x.mean())
    assert r["sd"] == pytest.approx(x.std(ddof=1))
    assert [r["p10"], r["median"], r["p90"]] == pytest.approx(list(np.percentile(x, [10, 50, 90])))
    assert set(d.index) >= {"LAP (Min-K%)", "LAP (recall)", "Outcome", "LLM", "p(first token)"}


def test_missing_column_error_names_it(pre):
    with pytest.raises(PaperSpecError, match="lap_mink"):
        T.table2(pre.drop(columns=["lap_mink"]), T.PaperSections.with_defaults(lap_measure="mink"))


def test_settings_from_the_study_and_defaults_from_the_schema():
    from lookahead.config import setting_default

    s = T.PaperSections.from_study(load_study(overrides={"lap_measure": "recall", "paper_cluster": "entity"}))
    assert s.paper.paper_cluster == "entity" and s.lap == "lap_recall" and s.paper.moderator_column is None
    d = T.PaperSections.with_defaults()
    assert (d.measures.lap_measure, d.paper.paper_cluster) == (setting_default("lap_measure"), setting_default("paper_cluster"))


def test_table5_difference_test_against_independent_computations(pre, post):
    """The clustered in-sample minus out-of-sample test: (1) exactly the dummies OLS of the
    stacked, fully interacted regression written here from the formula; (2) the two-sample
    computation from the two periods' own clustered regressions, (b_in - b_out) /
    sqrt(se_in^2 + se_out^2), which it matches up to the small-sample factor when the
    periods share no cluster (dates)."""
    s = T.PaperSections.with_defaults(lap_measure="mink", paper_cluster="date")
    post = post.assign(target_date=pd.to_datetime(post["target_date"]) + pd.Timedelta(days=400))
    tab = T.table5(pre, post, s)
    d = {k[5:]: v for k, v in tab.magnitudes.items() if k.startswith("diff_")}
    cols = ["outcome", "mu_hat", "lap_mink"]
    zi, zo = standardize_by_hand(pre, cols), standardize_by_hand(post, cols)
    assert not set(zi["target_date"]) & set(zo["target_date"])
    full = [["mu_hat_z"], ["lap_mink_z"], ["mu_hat_z", "lap_mink_z"]]
    r_in = ols_dummies(zi, "outcome_z", full, FE, "target_date")
    r_out = ols_dummies(zo, "outcome_z", full, FE, "target_date")
    assert d["difference"] == pytest.approx(r_in["beta"][2] - r_out["beta"][2], abs=1e-8)
    # (1) the stacked regression by hand
    st = pd.concat([zi.assign(oos=0.0), zo.assign(oos=1.0)], ignore_index=True)
    st["e_p"] = st["entity_num"].astype(str) + "|" + st["oos"].astype(str)
    st["t_p"] = st["period_num"].astype(str) + "|" + st["oos"].astype(str)
    r_st = ols_dummies(st, "outcome_z", full + [[*c, "oos"] for c in full], ["e_p", "t_p"], "target_date")
    assert -r_st["beta"][5] == pytest.approx(d["difference"], abs=1e-8)
    assert r_st["se"][5] == pytest.approx(d["std_error"], rel=1e-6)
    assert 2 * stats.t.sf(abs(r_st["t"][5]), r_st["G"] - 1) == pytest.approx(d["p_two_sided"], rel=1e-5)
    # (2) the two-sample computation
    se2 = math.sqrt(r_in["se"][2] ** 2 + r_out["se"][2] ** 2)
    assert d["std_error"] == pytest.approx(se2, rel=0.05)
    assert d["t"] == pytest.approx((r_in["beta"][2] - r_out["beta"][2]) / se2, rel=0.05)
    assert d["p_one_sided"] < 0.05  # the planted in-sample interaction (delta=3) vs none
    row = tab.extra_rows[T.DIFFERENCE_ROW]
    assert row[1] == f"{d['difference']:.3f}" and row[3] == f"[{fmt_p(d['p_one_sided'])}]"


def test_out_of_sample_start_setting(post):
    dates = pd.to_datetime(post["target_date"])
    start = dates.sort_values().iloc[len(dates) // 2].date().isoformat()
    s = T.PaperSections.from_study(load_study(overrides={"paper_oos_start": start}))
    kept, note = T.out_of_sample(post, s)
    assert len(kept) == int((dates >= pd.Timestamp(start)).sum()) and 0 < len(kept) < len(post)
    assert start in note
    assert T.out_of_sample(post, T.PaperSections.with_defaults(lap_measure="mink"))[0] is post
    with pytest.raises(StudyConfigError, match="setting 'paper_oos_start'"):
        load_study(overrides={"paper_oos_start": "not a date"})


def test_table6_clusters_by_firm_whatever_paper_cluster_says():
    """The paper's Table VI clusters by firm while Tables II-V cluster by date: with
    paper_cluster = date, Table VI's standard errors are still the entity-clustered ones of
    a dummies OLS, and the analysis adds Table VI for a five-level forecast."""
    from lookahead.paper.analysis import run_paper_analysis

    labels = T.FIVE_LEVEL_LABELS
    df = make_panel(n_rows=600, n_entities=50, n_dates=20, seed=21, sample="pre", labels=labels)
    s = T.PaperSections.with_defaults(lap_measure="mink", paper_cluster="date")
    tab = T.table6(df, s)
    ref = ols_dummies(df, "outcome", [["mu_hat"], ["lap_mink"], ["mu_hat", "lap_mink"]], FE, "entity_num")
    _check(tab.columns[1], ref, ["LLM", "LAP", "LLM x LAP"])
    assert "clustered by entity" in tab.title
    res = run_paper_analysis(df, None, s, draws=0)
    assert "table6" in res.tables
    assert "entity" in res.tables["table6"].columns[1].vcov
    assert "date" in res.tables["table2"].columns[1].vcov
    three = make_panel(n_rows=300, n_entities=30, n_dates=10, seed=2, sample="pre")
    assert not T.is_five_level(three, s) and "table6" not in run_paper_analysis(three, None, s, draws=0).tables


def test_paper_tables_run_on_min_k_when_computed_and_captions_name_the_measure(pre):
    """The paper's tables are Min-K%: with the verdict on recall LAP they still run on
    lap_mink when the study computed it, and say so; without Min-K% values they run on the
    verdict's measure and the note says that is not the paper's."""
    from lookahead.paper.analysis import run_paper_analysis

    s = T.PaperSections.with_defaults(lap_measure="recall")
    res = run_paper_analysis(pre, None, s, draws=0)
    assert res.settings.measures.lap_measure == "mink"
    t2 = res.tables["table2"]
    ref = ols_dummies(pre, "outcome", [["mu_hat"], ["lap_mink"], ["mu_hat", "lap_mink"]], FE, "target_date")
    _check(t2.columns[1], ref, ["LLM", "LAP", "LLM x LAP"])
    for name, tab in res.tables.items():
        assert "Min-K%" in tab.title, name
    assert any("run on Min-K% LAP" in n and "verdict reads recall LAP" in n.replace("Recall", "recall") for n in res.notes), (
        res.notes
    )
    no_mink = pre.assign(lap_mink=np.nan)
    res2 = run_paper_analysis(no_mink, None, s, draws=0)
    assert res2.settings.measures.lap_measure == "recall"
    assert all("Min-K%" not in tab.title for tab in res2.tables.values())
    assert any("Min-K% LAP was not computed" in n for n in res2.notes)


def test_table4_note_says_what_is_constant(pre):
    """A confidence measure present but constant is named as constant, never as missing."""
    from lookahead.paper.analysis import run_paper_analysis

    df = pre.assign(first_token_prob=1.0, stated_confidence=np.nan)
    tab = T.table4(df, T.PaperSections.with_defaults(lap_measure="mink"))
    assert tab.columns == []
    assert any("is in the panel but constant at 1 in all" in n and "p(first token)" in n for n in tab.notes)
    assert any("Confidence" in n and "missing in every row" in n for n in tab.notes)
    res = run_paper_analysis(df, None, T.PaperSections.with_defaults(lap_measure="mink"), draws=0)
    skipped = [n for n in res.notes if n.startswith("Table IV skipped")]
    assert skipped and "constant at 1" in skipped[0] and "not in the panel" not in skipped[0]
