"""dbt Python model: every specification of the paper (Tables II-V), long format.

One row per (table, column, term) with estimate, std_error, t, p, N, R2, fixed effects,
vcov and the LAP measure used; plus Table II's economic magnitudes (kind = magnitude),
the Table V bootstrap p-value (kind = bootstrap, from `bootstrap_results`) and notes on
skipped tables (kind = note). Logic: lookahead/paper/ (tables.py, analysis.py)."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")  # build only after the data-quality gate has passed

    from lookahead.paper.dbt_entry import panel_columns, paper_tables_frame
    from lookahead.stats.panel_io import read_columns

    settings = dbt.ref("study_settings").df()
    cols = panel_columns(settings)  # only the columns the paper's regressions read
    return paper_tables_frame(
        settings,
        read_columns(dbt.ref("panel_pre"), cols),
        read_columns(dbt.ref("panel_post"), cols),
        boot=dbt.ref("bootstrap_results").df(),
    )
