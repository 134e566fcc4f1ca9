"""The verdict rule: one test per branch on hand-set facts (the rule alone), and the
same branches end to end on synthetic panels whose truth is known by construction
(regressions -> facts -> verdict), plus the DuckDB round trip the dbt model makes."""

from __future__ import annotations

import json
import math

import duckdb
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lookahead.stats.protocol import StatsSections, run_protocol
from lookahead.stats.verdict import (
    CONTAMINATION,
    MIXED,
    NO_EVIDENCE,
    UNDERPOWERED,
    VerdictFacts,
    decide,
    evaluate,
    placebo_mde,
    reason,
    verdict_frame,
)

# ---------------------------------------------------------------- the rule on facts

BASE = VerdictFacts.from_columns(
    beta3=0.5,
    beta3_t=3.0,
    beta3_p_one_sided=0.002,
    n_obs_pre=2000,
    theta_pooled=0.3,
    theta_pooled_t=4.0,
    theta_high=0.6,
    theta_high_t=5.0,
    theta_high_p=1e-5,
    theta_low=0.01,
    theta_low_t=0.2,
    theta_low_p=0.84,
    placebo_feasible=True,
    placebo_beta3=0.01,
    placebo_t=0.1,
    placebo_p_one_sided=0.46,
    n_obs_post=800,
    lap_n_pre=2000,
    lap_distinct_pre=2000,
    lap_sd_pre=0.29,
    lap_mean_pre=0.5,
    lap_mean_post=0.15,
    lap_min_sd_used=0.01,
    censoring_rate_pre=0.0,
    lap_measure="recall",
    cluster="entity",
    vcov="CRV1(entity_num)",
    approximated=False,
    n_rows_pre=2000,
    beta3_se=0.5 / 3.0,
    beta3_p_two_sided=0.004,
    beta3_df=39,
    n_clusters_pre=40,
    theta_diff=0.59,
    theta_diff_t=4.0,
    theta_diff_p_one_sided=1e-4,
    placebo_p_two_sided=0.92,
    n_clusters_post=40,
    lap_n_post=800,
    lap_distinct_post=800,
    lap_sd_post=0.1,
    lap_min_sd_post=0.01,
)


def facts(**kw) -> VerdictFacts:
    return BASE.with_columns(**kw)


def test_rule_contamination_detected():
    v, reason = decide(facts())
    assert v == CONTAMINATION
    assert "placebo passes" in reason and "Restrict backtests" in reason


def test_rule_no_evidence_when_beta3_not_significant():
    v, reason = decide(facts(beta3=0.01, beta3_t=0.3, beta3_p_one_sided=0.38))
    assert v == NO_EVIDENCE and "LAP varies" in reason


def test_rule_no_evidence_boundary_p_equal_alpha():
    assert decide(facts(beta3_p_one_sided=0.05))[0] == NO_EVIDENCE
    assert decide(facts(beta3_p_one_sided=0.0499))[0] == CONTAMINATION


def test_rule_underpowered_constant_lap_quotes_censoring():
    v, reason = decide(
        facts(lap_distinct_pre=1, lap_sd_pre=0.0, censoring_rate_pre=0.42, beta3=math.nan, beta3_p_one_sided=math.nan)
    )
    assert v == UNDERPOWERED and "42.0%" in reason and "constant" in reason


NULL_BETA3 = dict(beta3=0.01, beta3_t=0.3, beta3_p_one_sided=0.38, beta3_p_two_sided=0.76)


def test_rule_underpowered_censoring():
    v, reason = decide(facts(censoring_rate_pre=0.995, **NULL_BETA3))
    assert v == UNDERPOWERED and "99.5%" in reason


def test_rule_underpowered_tiny_sd_when_beta3_not_significant():
    v, reason = decide(facts(lap_sd_pre=0.001, **NULL_BETA3))
    assert v == UNDERPOWERED and "below the threshold" in reason


def test_rule_significant_beta3_on_lap_without_variation_is_underpowered():
    """The protocol reads a study whose LAP does not vary as underpowered: a significant
    beta_3 on such a regressor does not decide, whatever validation and placebo say; just
    above the threshold the same facts detect contamination."""
    o = evaluate(facts(lap_sd_pre=0.008))
    assert o.decision == UNDERPOWERED and o.path == "significant_no_variation"
    assert "LAP sd 0.008 is below the threshold" in reason(o) and "does not decide" in reason(o)
    assert decide(facts(lap_sd_pre=0.0101))[0] == CONTAMINATION
    # the clean-model case: recall LAP sd 1.3e-7, beta_3 of order 1e6 with a small wild p
    huge = facts(
        lap_sd_pre=1.3e-7,
        beta3=1.064e6,
        beta3_t=1.4,
        beta3_p_wild_one_sided=0.027,
        beta3_p_wild_two_sided=0.054,
        beta3_wild_draws=999,
    )
    assert decide(huge)[0] == UNDERPOWERED


def test_placebo_power_reported_never_decides():
    """seeds/000: the placebo passes at one-sided p > 0.10 and fails at or below it; a
    placebo whose minimum detectable effect (10% test) exceeds the pre-cutoff beta_3 still
    passes, and the reason says what it could not rule out; Mixed/invalid only when its p
    is at or below 0.10."""
    weak = dict(placebo_mde_regression=5.0, placebo_p_one_sided=0.46)
    o = evaluate(facts(**weak))
    assert o.decision == CONTAMINATION and o.placebo == "passes_low_power"
    assert "could not rule out" in reason(o) and "effective-cutoff" in reason(o)
    for p, want in ((0.1001, CONTAMINATION), (0.10, MIXED), (0.02, MIXED)):
        assert decide(facts(placebo_mde_regression=5.0, placebo_p_one_sided=p))[0] == want, p
    # without a regression MDE the analytic one is that of the one-sided 10% test
    f = facts(placebo_se=0.1, placebo_df=math.inf, placebo_mde_regression=math.nan)
    want = (stats.norm.ppf(0.90) + stats.norm.ppf(0.80)) * 0.1
    assert placebo_mde(f) == pytest.approx(want, rel=1e-12)


def test_rule_underpowered_singular_regression():
    v, reason = decide(
        facts(beta3=math.nan, beta3_t=math.nan, beta3_p_one_sided=math.nan, beta3_note="collinear term(s) dropped: mu_hat:lap")
    )
    assert v == UNDERPOWERED and "not estimable" in reason and "mu_hat:lap" in reason


def test_rule_mixed_validation_fails_high_not_significant():
    v, reason = decide(facts(theta_high=0.05, theta_high_t=0.9, theta_high_p=0.37))
    assert v == MIXED and "(validation failed)" in reason and "high-LAP theta" in reason


def test_rule_mixed_validation_fails_low_not_below_high():
    v, reason = decide(
        facts(theta_low=0.4, theta_low_t=3.0, theta_low_p=0.003, theta_diff=0.2, theta_diff_t=1.0, theta_diff_p_one_sided=0.16)
    )
    assert v == MIXED and "does not significantly exceed the low-LAP theta" in reason
    assert "a difference of 0.2 (t 1, one-sided p 0.16 by CRV1), not below 0.05" in reason


def test_rule_low_significant_but_clearly_below_high_is_the_pattern():
    v, reason = decide(facts(theta_low=0.1, theta_low_t=3.0, theta_low_p=0.003))
    assert v == CONTAMINATION and "low-LAP theta is itself significant (0.1 per unit" in reason
    assert "but smaller per sd" in reason


def test_rule_mixed_placebo_fails():
    v, reason = decide(facts(placebo_beta3=0.4, placebo_t=2.5, placebo_p_one_sided=0.01))
    assert v == MIXED and "(placebo failed)" in reason and "survives" in reason


def test_rule_placebo_boundary_p_equal_010_fails():
    assert decide(facts(placebo_p_one_sided=0.10))[0] == MIXED
    assert decide(facts(placebo_p_one_sided=0.1001))[0] == CONTAMINATION


def test_rule_mixed_both_fail():
    v, reason = decide(facts(theta_high_p=0.5, placebo_p_one_sided=0.01))
    assert v == MIXED and "(validation failed; placebo failed)" in reason


def test_rule_no_post_sample_is_never_detected():
    v, reason = decide(facts(placebo_feasible=False, placebo_beta3=math.nan, placebo_p_one_sided=math.nan, n_obs_post=0))
    assert v == MIXED and "(placebo infeasible)" in reason


def test_rule_post_beta3_not_estimable():
    v, reason = decide(facts(placebo_beta3=math.nan, placebo_p_one_sided=math.nan))
    assert v == MIXED and "(placebo not estimable)" in reason


def test_rule_approximated_is_said():
    assert "approximated" in decide(facts(approximated=True))[1]


# ---------------------------------------------------------------- end to end


def _sample(
    rng, n_entities, n_periods, per_cell, lap_lo, lap_hi, memorize_forecast, memorize_recall, censored=False, start_period=0
):
    idx = [(e, t) for e in range(n_entities) for t in range(start_period, start_period + n_periods) for _ in range(per_cell)]
    df = pd.DataFrame(idx, columns=["entity_num", "period_num"])
    n = len(df)
    df["row_id"] = [f"r{start_period}_{i}" for i in range(n)]
    df["target_date"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(df["period_num"] * 30 + rng.integers(0, 28, n), "D")
    ent = rng.normal(0, 0.5, n_entities + 1)[df["entity_num"]]
    per = rng.normal(0, 0.5, start_period + n_periods + 1)[df["period_num"]]
    shock = rng.normal(size=n)
    df["outcome"] = ent + per + shock
    up = shock > 0  # the direction a memorizing model has seen
    lap = rng.uniform(lap_lo, lap_hi, n)
    recalls = (lap > 0.5) & (rng.uniform(size=n) < (lap - 0.5) * 2)  # only high LAP
    s = rng.uniform(size=n)
    if memorize_recall:
        s = np.where(recalls, np.where(up, 0.95, 0.05), s)
    df["p_up"], df["p_down"] = lap * s, lap * (1 - s)
    mu = rng.choice([-1.0, 1.0], n)
    if memorize_forecast:
        mu = np.where(recalls, np.where(up, 1.0, -1.0), mu)
    df["mu_hat"] = mu
    if censored:
        df["p_up"], df["p_down"] = np.nan, np.nan
        df["lap"], df["ud"] = 0.0, 0.0
    else:
        df["lap"] = df["p_up"] + df["p_down"]
        df["ud"] = df["p_up"] - df["p_down"]
    df["high_lap"] = (df["lap"] > df["lap"].median()).astype(int)
    df["approximated"] = False
    return df


def panels(kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    E, T, C = 40, 12, 4
    mem_f = kind in ("contaminated", "validation_fails", "placebo_fails", "both_fail", "no_post", "weak_placebo")
    mem_r = kind in ("contaminated", "placebo_fails", "no_post", "weak_placebo")
    pre = _sample(rng, E, T, C, 0.0, 1.0, mem_f, mem_r, censored=(kind == "underpowered"))
    if kind == "no_post":
        return pre, pre.iloc[0:0].copy()
    post_mem = kind in ("placebo_fails", "both_fail")
    # post-cutoff LAP shrinks (to 0-0.5, or 0-0.15 for a placebo too weak to detect the
    # pre-cutoff beta_3: its minimum detectable effect exceeds it)
    post = _sample(
        rng,
        E,
        6,
        C,
        0.0,
        1.0 if post_mem else 0.15 if kind == "weak_placebo" else 0.5,
        post_mem,
        post_mem,
        censored=(kind == "underpowered"),
        start_period=T,
    )
    return pre, post


SETTINGS = StatsSections.with_defaults(cluster="entity", lap_measure="recall")


@pytest.mark.parametrize(
    "kind,expected,phrase",
    [
        ("contaminated", CONTAMINATION, "placebo passes"),
        ("clean", NO_EVIDENCE, "indistinguishable from zero"),
        ("underpowered", UNDERPOWERED, "100.0%"),
        ("validation_fails", MIXED, "(validation failed)"),
        ("placebo_fails", MIXED, "(placebo failed)"),
        ("both_fail", MIXED, "(validation failed; placebo failed)"),
        ("no_post", MIXED, "(placebo infeasible)"),
        ("weak_placebo", CONTAMINATION, "could not rule out a post-cutoff effect"),
    ],
)
def test_end_to_end_branch(kind, expected, phrase):
    pre, post = panels(kind)
    results = run_protocol(pre, post, SETTINGS)
    out = verdict_frame(results, pre, post, SETTINGS)
    assert len(out) == 1
    assert out["verdict"].iloc[0] == expected, out["reason"].iloc[0]
    assert phrase in out["reason"].iloc[0]


def test_no_post_rows_say_placebo_infeasible_in_results():
    pre, post = panels("no_post")
    res = run_protocol(pre, post, SETTINGS)
    post_rows = res[res["sample"] == "post"]
    assert len(post_rows) == 8 and post_rows["estimate"].isna().all()
    assert post_rows["warning"].str.contains("placebo").all()


def test_verdict_same_after_duckdb_round_trip():
    """The dbt verdict model reads regression_results back from DuckDB (NULL -> NaN)."""
    pre, post = panels("contaminated")
    res = run_protocol(pre, post, SETTINGS)
    con = duckdb.connect()
    con.register("r", res)
    back = con.execute("select * from r").df()
    a = verdict_frame(res, pre, post, SETTINGS)
    b = verdict_frame(back, pre, post, SETTINGS)
    assert a["verdict"].iloc[0] == b["verdict"].iloc[0] == CONTAMINATION
    con.register("v", b)
    assert con.execute("select count(*) from v where verdict is not null").fetchone()[0] == 1


def test_approximated_rows_label_results_and_verdict():
    pre, post = panels("contaminated")
    pre = pre.copy()
    pre["approximated"] = pd.array([True] + [None] * (len(pre) - 1), dtype="boolean")
    res = run_protocol(pre, post, SETTINGS)
    assert res.loc[res["sample"] == "pre", "warning"].str.contains("approximated").all()
    assert not res.loc[res["sample"] == "post", "warning"].str.contains("approximated").any()
    out = verdict_frame(res, pre, post, SETTINGS)
    assert bool(out["approximated"].iloc[0]) and "approximated" in out["reason"].iloc[0]


def test_settings_read_from_study_settings_row():
    """The statistics read the study dbt recorded (study_settings.settings_json), checked
    by the one settings loader; their defaults are the schema's."""
    from lookahead.config import StudyConfigError, load_study, setting_default
    from lookahead.stats.protocol import SettingsError

    study = load_study(overrides={"cluster": "date", "lap_measure": "mink", "nw_lag": 5})
    row = pd.DataFrame({"settings_json": [study.settings_json()]})
    s = StatsSections.from_frame(row)
    assert (s.protocol.cluster, s.measures.lap_measure, s.protocol.nw_lag) == ("date", "mink", 5)
    assert s.protocol.wild_bootstrap_draws == study.protocol.wild_bootstrap_draws
    assert StatsSections.with_defaults().protocol.cluster == setting_default("cluster")
    with pytest.raises(TypeError, match="not a setting of section.*: wild"):
        StatsSections.with_defaults(wild=3)
    with pytest.raises(SettingsError, match="exactly one row, has 2"):
        StatsSections.from_frame(pd.concat([row, row]))
    bad = json.loads(study.settings_json())
    bad["nw_lag"] = "four"
    with pytest.raises(StudyConfigError, match="setting 'nw_lag'"):
        StatsSections.from_frame(pd.DataFrame({"settings_json": [json.dumps(bad)]}))


def test_panel_missing_column_names_table():
    from lookahead.stats.fe_regression import RegressionInputError

    pre, post = panels("clean")
    with pytest.raises(RegressionInputError, match=r"table 'panel_pre' lacks column\(s\) \['ud'\]"):
        run_protocol(pre.drop(columns="ud"), post, SETTINGS)


def test_mink_threshold_is_relative_to_scale():
    """Min-K% LAP lives on a model-specific scale: 1% coefficient of variation."""
    from lookahead.stats.verdict import lap_min_sd

    small = pd.Series([1e-4, 2e-4, 3e-4])
    assert lap_min_sd(StatsSections.with_defaults(lap_measure="mink"), small) == pytest.approx(0.01 * 2e-4)
    assert lap_min_sd(StatsSections.with_defaults(lap_measure="recall"), small) == 0.01
    assert lap_min_sd(StatsSections.with_defaults(lap_min_sd=0.2), small) == 0.2


def test_censoring_rate_uses_flags_or_missing_mass():
    from lookahead.stats.verdict import censoring_rate

    flags = pd.DataFrame(
        {
            "up_censored": [True, True, False, None],
            "down_censored": [True, False, False, True],
            "p_up": [0.1, 0.1, 0.1, 0.1],
            "p_down": [0.1, 0.1, 0.1, 0.1],
        }
    )
    assert censoring_rate(flags) == 0.5  # rows 0 and 3 (unknown flag counts as censored)
    probs = pd.DataFrame({"p_up": [np.nan, 0.0, 0.2, np.nan], "p_down": [np.nan, 0.0, np.nan, 0.3]})
    assert censoring_rate(probs) == 0.5  # rows 0 and 1: neither label observed
    assert math.isnan(censoring_rate(pd.DataFrame({"lap": [0.1]})))


def test_collapsed_post_lap_passes_placebo_and_says_why():
    """Post-cutoff recall labels all censored: LAP exactly 0 after the cutoff, the pattern
    the protocol expects. beta_3 is then not estimable post-cutoff, and the placebo passes
    because nothing is left for LAP to proxy; no post rows at all stays infeasible."""
    pre, post = panels("contaminated")
    post = post.copy()
    post["p_up"], post["p_down"] = 0.0, 0.0
    post["lap"], post["ud"] = 0.0, 0.0
    post["high_lap"] = 0
    res = run_protocol(pre, post, SETTINGS)
    assert res.loc[(res["sample"] == "post") & (res["term"] == "mu_hat:lap"), "estimate"].isna().all()
    out = verdict_frame(res, pre, post, SETTINGS).iloc[0]
    assert out["verdict"] == CONTAMINATION, out["reason"]
    assert "post-cutoff LAP collapsed: constant at 0 in all" in out["reason"]
    assert "nothing is left for LAP to proxy" in out["reason"]
    assert out["placebo_status"] == "placebo passes"
    empty = verdict_frame(run_protocol(pre, post.iloc[0:0], SETTINGS), pre, post.iloc[0:0], SETTINGS).iloc[0]
    assert empty["verdict"] == MIXED and "(placebo infeasible)" in empty["reason"]
