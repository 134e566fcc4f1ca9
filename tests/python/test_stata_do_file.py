"""The Stata do-file carries the protocol's reghdfe commands for the study's settings,
and the exported .dta panels read back with the values the package regressed on."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lookahead.stats.protocol import StatsSections
from lookahead.stats.stata import export_stata_panels, stata_do_file, write_stata_do_file


def test_protocol_commands_cluster_entity():
    text = stata_do_file(StatsSections.with_defaults(cluster="entity"))
    assert 'use "outputs/panel_pre", clear' in text
    assert "reghdfe outcome ud, absorb(entity_num period_num) cluster(entity_num)" in text
    assert "reghdfe outcome ud if high_lap == 1, absorb(entity_num period_num) cluster(entity_num)" in text
    assert "reghdfe outcome ud if high_lap == 0, absorb(entity_num period_num) cluster(entity_num)" in text
    assert "reghdfe outcome c.mu_hat##c.lap, absorb(entity_num period_num) cluster(entity_num)" in text
    assert "ttail(e(df_r), `t3')" in text
    assert 'esttab val_pooled val_high val_low detection using "results/stata_pre.csv"' in text
    assert 'use "outputs/panel_post", clear' in text


def test_cluster_settings_map_to_stata_options():
    assert "cluster(target_date)" in stata_do_file(StatsSections.with_defaults(cluster="date"))
    assert "cluster(period_num)" in stata_do_file(StatsSections.with_defaults(cluster="period"))
    none = stata_do_file(StatsSections.with_defaults(cluster="none"))
    assert "vce(robust)" in none and "cluster(" not in none


def test_no_post_rows_leave_out_the_placebo(tmp_path):
    pre = pd.DataFrame({"entity_num": [1, 2], "outcome": [0.1, 0.2]})
    post = pre.iloc[0:0]
    path = write_stata_do_file(tmp_path / "lookahead.do", StatsSections.with_defaults(), pre, post)
    text = path.read_text()
    assert "panel_post" not in text and "placebo (step 5) is infeasible" in text


def test_single_entity_uses_newey_with_stated_lag():
    text = stata_do_file(StatsSections.with_defaults(nw_lag=3), single_entity=True, n_obs=200)
    assert "newey outcome c.mu_hat##c.lap i.period_num, lag(3) force" in text
    assert "reghdfe" not in text.split("capture mkdir")[1]


def test_export_dta_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    n = 30
    pre = pd.DataFrame(
        {
            "row_id": [f"r{i}" for i in range(n)],
            "entity_id": ["AAPL"] * n,
            "entity_num": rng.integers(1, 4, n),
            "period_num": rng.integers(1, 5, n),
            "text_date": pd.date_range("2020-01-01", periods=n).date,
            "target_date": pd.date_range("2020-01-02", periods=n).date,
            "outcome": rng.normal(size=n),
            "mu_hat": rng.choice([-1.0, 1.0], n),
            "ud": rng.uniform(-1, 1, n),
            "lap": rng.uniform(0, 1, n),
            "high_lap": rng.integers(0, 2, n),
        }
    )
    written = export_stata_panels(pre, None, tmp_path)
    assert [p.name for p in written] == ["panel_pre.dta"]
    back = pd.read_stata(written[0])
    np.testing.assert_allclose(back["outcome"], pre["outcome"])
    assert list(back["row_id"]) == list(pre["row_id"])
    assert pd.Timestamp(back["target_date"].iloc[0]) == pd.Timestamp("2020-01-02")
