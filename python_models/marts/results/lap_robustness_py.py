"""dbt Python model: beta_3 under every LAP measure the study computed (one row each).

The verdict reads only var lap_measure; this table is the report's robustness check
across var lap_measures (lookahead/stats/robustness.py has the logic and the why)."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")
    # After the last model that fits (the chain regression_results -> verdict ->
    # bootstrap_results -> paper_tables runs the fits one at a time): the fit counts
    # singletons from warnings, which Python records process-wide, so two fits in
    # parallel threads could count each other's.
    dbt.ref("paper_tables")

    from lookahead.measures import study_measures
    from lookahead.stats.panel_io import read_columns
    from lookahead.stats.protocol import StatsSections, protocol_columns, study_from_frame
    from lookahead.stats.robustness import robustness_frame

    frame = dbt.ref("study_settings").df()
    settings = StatsSections.from_frame(frame)
    measures = study_measures(study_from_frame(frame))
    cols = [*protocol_columns(settings), *(m.column for m in measures)]
    return robustness_frame(read_columns(dbt.ref("panel_pre"), cols), measures, settings)
