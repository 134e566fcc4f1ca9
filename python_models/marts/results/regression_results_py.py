"""dbt Python model: the protocol's fixed-effects regressions (steps 3-5).

One row per (spec, sample, term). All logic lives in lookahead.stats (a dbt Python
model cannot import another model); this file only wires tables to it. It refs
gate_panel so that it builds only after the Great Expectations gate has passed. It reads
only the panel columns the regressions use (lookahead.stats.panel_io)."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")  # dependency: the data-quality gate must pass first

    from lookahead.stats.panel_io import read_columns
    from lookahead.stats.protocol import StatsSections, protocol_columns, run_protocol

    settings = StatsSections.from_frame(dbt.ref("study_settings").df())
    cols = protocol_columns(settings)  # only the columns the regressions read
    panel_pre = read_columns(dbt.ref("panel_pre"), cols)
    panel_post = read_columns(dbt.ref("panel_post"), cols)
    return run_protocol(panel_pre, panel_post, settings)
