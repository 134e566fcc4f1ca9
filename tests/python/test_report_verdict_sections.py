"""REPORT.md's validation, detection and verdict sections, rendered from CSVs of real
regression results: p-values in the validation table, the high-minus-low test, the wild
bootstrap beside CRV1, the minimum detectable effect, and warnings named by regression."""

from __future__ import annotations

import pandas as pd
from test_verdict import panels

from lookahead.config import load_study
from lookahead.pages.report import render
from lookahead.stats.protocol import StatsSections, run_protocol
from lookahead.stats.verdict import verdict_frame

SETTINGS = StatsSections.with_defaults(cluster="entity", lap_measure="recall", wild_bootstrap_draws=99)


def recorded_settings() -> pd.DataFrame:
    """The study_settings table as dbt writes it: the report reads its settings_json."""
    study = load_study(
        overrides={
            "study_name": "s",
            "model_id": "m",
            "training_cutoff": "2021-12-31",
            "data_path": "d.csv",
            "lap_measure": "recall",
            "mink_mean": "geometric",
        }
    )
    return pd.DataFrame([{"study_name": "s", "settings_json": study.settings_json()}])


def test_sections_show_tests_and_name_regressions(tmp_path):
    pre, post = panels("clean", seed=3)
    pre = pre.iloc[:-7]  # a few rows fewer: some singleton periods are dropped with a warning
    res = run_protocol(pre, post, SETTINGS)
    res.loc[res["spec"] == "validation_low_lap", "warning"] = "example warning"
    v = verdict_frame(res, pre, post, SETTINGS)
    settings = recorded_settings()
    for name, df in (("study_settings", settings), ("regression_results", res), ("verdict", v)):
        df.to_csv(tmp_path / f"{name}.csv", index=False)
    text, verdict = render(tmp_path)
    assert verdict == v["verdict"].iloc[0]
    assert "| sample | ud (t) | p (two-sided) | wild bootstrap p (two-sided) |" in text
    assert "ud:high_lap (t) | one-sided p (ud:high_lap > 0) | wild bootstrap one-sided p" in text
    assert "WCR bootstrap (webb weights, 99 draws" in text
    assert "Minimum detectable beta_3 (one-sided 5% test, 80% power): " in text
    assert "- validation_low_lap (pre): example warning" in text
    assert "The minimum detectable beta_3 is " in text  # the clean study: a null


def test_collapsed_post_lap_prints_not_estimable_with_reason(tmp_path):
    pre, post = panels("contaminated", seed=4)
    post = post.copy()
    post["p_up"], post["p_down"], post["lap"], post["ud"], post["high_lap"] = 0.0, 0.0, 0.0, 0.0, 0
    res = run_protocol(pre, post, SETTINGS)
    v = verdict_frame(res, pre, post, SETTINGS)
    settings = recorded_settings()
    for name, df in (("study_settings", settings), ("regression_results", res), ("verdict", v)):
        df.to_csv(tmp_path / f"{name}.csv", index=False)
    text, _verdict = render(tmp_path)
    placebo = text.split("## 5. Placebo")[1].split("## 6.")[0]
    row = next(line for line in placebo.splitlines() if line.startswith("| post-cutoff"))
    assert row.count("not estimable (collinear with the fixed effects or other terms)") == 2
    assert "| NA | NA |" in row  # no p for a term without an estimate
    assert "Placebo: placebo passes: post-cutoff LAP collapsed: constant at 0" in placebo
