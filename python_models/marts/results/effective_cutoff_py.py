"""dbt Python model: the effective training cutoff, one row per measure the study computed.

The month where LAP falls beyond a linear trend (level-shift fit with the trend in both
models, a bootstrap of the no-break trend for its p, Bai 1997 interval), or a steady
decline, beside the stated training_cutoff. A warning beside the verdict,
never an input to it. Logic and the why: lookahead/stats/cutoff.py, docs/cutoff.md."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")
    # Scheduling, not data: dbt hands out ready nodes by graph depth, then by name. Without
    # this edge this model and lap_by_period_py, ready with panel_pre, take both threads
    # while regression_results_py (the longest chain left: the fits, then the verdict)
    # waits behind them and then runs alone. With it, this model is as deep as the fits
    # and runs beside them (BENCHMARKS.md, "The side-by-side build at 91,361 rows").
    dbt.ref("panel_pre")

    from lookahead.stats.cutoff import build_frame

    return build_frame(dbt.ref("panel"), dbt.ref("study_settings").df(), "effective_cutoff")
