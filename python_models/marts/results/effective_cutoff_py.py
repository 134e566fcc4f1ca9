"""dbt Python model: the effective training cutoff, one row per measure the study computed.

The month where LAP falls beyond a linear trend (level-shift fit with the trend in both
models, a bootstrap of the no-break trend for its p, Bai 1997 interval), or a steady
decline, beside the stated training_cutoff. A warning beside the verdict,
never an input to it. Logic and the why: lookahead/stats/cutoff.py, docs/cutoff.md."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")

    from lookahead.stats.cutoff import build_frame

    return build_frame(dbt.ref("panel"), dbt.ref("study_settings").df(), "effective_cutoff")
