"""dbt Python model: the protocol's fixed-effects regressions (steps 3-5).

One row per (spec, sample, term). All logic lives in lookahead.stats (a dbt Python
model cannot import another model); this file only wires tables to it. It refs
gate_panel so that it builds only after the Great Expectations gate has passed."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")  # dependency: the data-quality gate must pass first

    from lookahead.stats.protocol import StatsSettings, run_protocol

    settings = StatsSettings.from_frame(dbt.ref("study_settings").df())
    panel_pre = dbt.ref("panel_pre").df()
    panel_post = dbt.ref("panel_post").df()
    return run_protocol(panel_pre, panel_post, settings)
