"""The verdict's cases (docs/verdict.md): hand-set facts per case.

docs/verdict.md holds each case's verdict and exact reason; test_verdict_cases.py checks
that the rule produces exactly that text, so neither can change without the other."""

from __future__ import annotations

import math

from lookahead.stats.verdict import VerdictFacts

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
    beta3_df=59,
    n_clusters_pre=60,
    theta_diff=0.59,
    theta_diff_t=4.0,
    theta_diff_p_one_sided=1e-4,
    placebo_p_two_sided=0.92,
    n_clusters_post=60,
    lap_n_post=800,
    lap_distinct_post=800,
    lap_sd_post=0.1,
    lap_min_sd_post=0.01,
    wild_draws=999,
    theta_low_sd=0.01,
    theta_high_sd=0.6,
    n_forecast_pre=2000,
    n_lap_values_pre=2000,
)

NAN = math.nan
NOT_ESTIMABLE = dict(beta3=NAN, beta3_t=NAN, beta3_p_one_sided=NAN, beta3_p_two_sided=NAN, beta3_se=NAN)

CASES: dict[str, dict] = {
    "contamination": {},
    "beta3_t_zero": dict(beta3=0.0, beta3_t=0.0, beta3_p_one_sided=0.5, beta3_p_two_sided=1.0),
    "beta3_significantly_negative": dict(
        beta3=-0.5, beta3_t=-4.0, beta3_p_one_sided=0.9999, beta3_p_two_sided=0.0002, beta3_se=0.125
    ),
    "high_theta_significant_negative": dict(
        theta_high=-0.6, theta_high_t=-5.0, theta_high_p=1e-5, theta_diff=-0.61, theta_diff_t=-4.1, theta_diff_p_one_sided=0.9999
    ),
    "low_theta_significant": dict(
        theta_low=0.4, theta_low_t=3.0, theta_low_p=0.003, theta_diff=0.2, theta_diff_t=1.0, theta_diff_p_one_sided=0.16
    ),
    "low_theta_significant_but_below_high": dict(
        theta_low=0.1, theta_low_t=3.0, theta_low_p=0.003, theta_diff=0.5, theta_diff_t=3.5, theta_diff_p_one_sided=0.0005
    ),
    "low_theta_large_insignificant": dict(
        theta_high=1.2,
        theta_high_t=2.5,
        theta_high_p=0.017,
        theta_low=19.2,
        theta_low_t=2.02,
        theta_low_p=0.053,
        theta_diff=-18.0,
        theta_diff_t=-1.9,
        theta_diff_p_one_sided=0.97,
    ),
    "placebo_infeasible": dict(
        placebo_feasible=False,
        placebo_beta3=NAN,
        placebo_t=NAN,
        placebo_p_one_sided=NAN,
        placebo_p_two_sided=NAN,
        n_obs_post=0,
        lap_n_post=0,
        lap_distinct_post=0,
        lap_sd_post=NAN,
        lap_mean_post=NAN,
        n_clusters_post=NAN,
    ),
    "placebo_collapsed_lap": dict(
        placebo_beta3=NAN,
        placebo_t=NAN,
        placebo_p_one_sided=NAN,
        placebo_p_two_sided=NAN,
        lap_distinct_post=1,
        lap_sd_post=0.0,
        lap_mean_post=0.0,
    ),
    # post-cutoff LAP collapsed but beta_3 still estimated on what is left (the demo: SE 52)
    "placebo_collapsed_lap_estimable": dict(
        placebo_beta3=3.3,
        placebo_t=0.063,
        placebo_p_one_sided=0.47,
        placebo_p_two_sided=0.95,
        placebo_se=52.2,
        placebo_df=29,
        lap_sd_post=0.0019,
        placebo_mde_regression=131.2,
    ),
    "placebo_not_estimable": dict(placebo_beta3=NAN, placebo_t=NAN, placebo_p_one_sided=NAN, placebo_p_two_sided=NAN),
    "post_beta3_significantly_negative": dict(
        placebo_beta3=-0.4, placebo_t=-3.0, placebo_p_one_sided=0.998, placebo_p_two_sided=0.004
    ),
    "placebo_fails": dict(placebo_beta3=0.4, placebo_t=2.5, placebo_p_one_sided=0.01, placebo_p_two_sided=0.02),
    "significant_beta3_little_lap_variation": dict(lap_sd_pre=0.008),
    "null_beta3_little_lap_variation": dict(
        beta3=0.01, beta3_t=0.3, beta3_p_one_sided=0.38, beta3_p_two_sided=0.76, beta3_se=0.033, lap_sd_pre=0.008
    ),
    "no_pre_rows": dict(
        NOT_ESTIMABLE,
        n_rows_pre=0,
        n_obs_pre=0,
        lap_n_pre=0,
        lap_distinct_pre=0,
        lap_sd_pre=NAN,
        lap_mean_pre=NAN,
        censoring_rate_pre=NAN,
        theta_high=NAN,
        theta_high_t=NAN,
        theta_high_p=NAN,
        theta_low=NAN,
        theta_low_t=NAN,
        theta_low_p=NAN,
        theta_diff=NAN,
        theta_diff_t=NAN,
        theta_diff_p_one_sided=NAN,
        n_clusters_pre=NAN,
        beta3_df=NAN,
    ),
    "too_few_rows": dict(
        NOT_ESTIMABLE,
        n_rows_pre=3,
        n_obs_pre=3,
        lap_n_pre=3,
        lap_distinct_pre=3,
        lap_sd_pre=0.3,
        beta3_note="not estimable: 0 singleton observation(s) dropped leave 3 row(s) for 3 term(s)",
    ),
    "lap_constant": dict(
        NOT_ESTIMABLE,
        lap_distinct_pre=1,
        lap_sd_pre=0.0,
        censoring_rate_pre=0.42,
        beta3_note="collinear term(s) dropped: lap, mu_hat:lap",
    ),
    "few_clusters_wild": dict(
        n_clusters_pre=12,
        beta3_df=11,
        beta3_p_one_sided=0.02,
        beta3_p_wild_one_sided=0.08,
        beta3_p_wild_two_sided=0.16,
        beta3_g_star=7.9,
    ),
    "few_clusters_significantly_negative": dict(
        beta3=-0.5,
        beta3_t=-4.0,
        beta3_p_one_sided=0.9999,
        beta3_p_two_sided=0.0002,
        beta3_se=0.125,
        n_clusters_pre=12,
        beta3_df=11,
        beta3_p_wild_one_sided=0.985,
        beta3_p_wild_two_sided=0.03,
        beta3_g_star=11.2,
    ),
    "wild_bootstrap_zero": dict(
        n_clusters_pre=30,
        beta3_df=29,
        n_clusters_post=30,
        beta3_p_wild_one_sided=0.0,
        theta_high_p_wild=0.0,
        theta_low_p_wild=0.6,
        theta_diff_p_wild_one_sided=0.0,
        placebo_p_wild_one_sided=0.47,
    ),
    "p_near_threshold": dict(beta3_p_one_sided=0.049999, placebo_p_one_sided=0.100001),
    "forecasts_unparsed": dict(
        NOT_ESTIMABLE,
        lap_n_pre=0,
        lap_distinct_pre=0,
        lap_sd_pre=NAN,
        lap_mean_pre=NAN,
        n_forecast_pre=0,
        n_lap_values_pre=2000,
        n_obs_pre=0,
        beta3_note="no observations: regression not estimated",
    ),
    # few clusters where a significant beta_3 is read with its validation and placebo: the
    # warning names G and G* of every test that decided (issue: a verdict that holds its size)
    "few_clusters_contamination": dict(
        n_clusters_pre=8,
        beta3_df=7,
        beta3_g_star=5.1,
        beta3_p_wild_one_sided=0.01,
        beta3_p_wild_two_sided=0.02,
        theta_high_n_clusters=8,
        theta_high_g_star=6.3,
        theta_high_p_wild=0.01,
        theta_diff_n_clusters=8,
        theta_diff_g_star=4.4,
        theta_diff_p_wild_one_sided=0.02,
        n_clusters_post=8,
        placebo_g_star=6.0,
        placebo_p_wild_one_sided=0.45,
        placebo_p_wild_two_sided=0.9,
    ),
    # the placebo could not have detected the pre-cutoff effect: it passes (the protocol's
    # rule decides), and the reason says what it could not rule out
    "placebo_low_power": dict(placebo_mde_regression=0.9, placebo_p_wild_one_sided=0.46, placebo_wild_draws=999),
    "placebo_informative": dict(placebo_mde_regression=0.3, placebo_p_wild_one_sided=0.46, placebo_wild_draws=999),
    # a p still within two Monte Carlo SEs of its threshold after the draws were extended
    "borderline_beta3": dict(
        beta3_p_wild_one_sided=0.0498,
        beta3_p_wild_two_sided=0.0996,
        beta3_wild_draws=63_999,
        beta3_p_one_sided=0.03,
        theta_high_p_wild=1e-4,
        theta_diff_p_wild_one_sided=1e-4,
        placebo_p_wild_one_sided=0.46,
    ),
    "borderline_placebo": dict(
        placebo_p_wild_one_sided=0.1008,
        placebo_wild_draws=63_999,
        placebo_beta3=0.2,
        placebo_t=1.3,
        placebo_p_one_sided=0.1,
        placebo_p_two_sided=0.2,
    ),
    # every outcome missing: named as missing outcomes, not as missing forecasts
    "outcomes_missing": dict(
        NOT_ESTIMABLE,
        lap_n_pre=0,
        lap_distinct_pre=0,
        lap_sd_pre=NAN,
        lap_mean_pre=NAN,
        n_forecast_pre=0,
        n_outcome_pre=0,
        n_mu_hat_pre=2000,
        n_lap_values_pre=2000,
        n_obs_pre=0,
        beta3_note="no observations: regression not estimated",
    ),
    # mu_hat identical to LAP: lap dropped, and mu_hat:lap is not estimable (never renamed)
    "lap_main_effect_dropped": dict(
        NOT_ESTIMABLE,
        beta3_note="collinear term(s) dropped: lap; not estimable: mu_hat:lap: its main effect "
        "lap was dropped as collinear, so the remaining coefficient would measure a "
        "different product",
    ),
    # rows without LAP are in neither half of the split, and the reason counts them
    "rows_without_lap": dict(n_rows_pre=2150, n_lap_values_pre=2000),
    "single_entity_newey_west": dict(
        beta3=-0.3,
        beta3_t=-2.18,
        beta3_p_one_sided=0.965,
        beta3_p_two_sided=0.07,
        beta3_se=0.3 / 2.18,
        beta3_df=6,
        n_obs_pre=11,
        n_rows_pre=11,
        n_clusters_pre=NAN,
        vcov="NW(lag=2, Bartlett; N/(N-K))",
    ),
}


def case_facts(name: str) -> VerdictFacts:
    """A case's facts; the high-LAP theta per sd is the low one plus the difference, as
    the difference regression defines it."""
    f = BASE.with_columns(**CASES[name])
    return f.with_columns(theta_high_sd=f.theta_low.per_sd + f.theta_diff.estimate)
