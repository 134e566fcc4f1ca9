"""dbt Python model: LAP by realization month, per measure the study computed.

n, mean, trimmed mean and a 95% entity-bootstrap interval per (measure, month): the
series the effective cutoff is read from and the report's LAP-by-month figure.
Logic and the why: lookahead/stats/cutoff.py, docs/cutoff.md."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")

    from lookahead.stats.cutoff import build_frame

    return build_frame(dbt.ref("panel"), dbt.ref("study_settings").df(), "lap_by_period")
