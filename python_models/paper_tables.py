"""dbt Python model: every specification of the paper (Tables II-V), long format.

One row per (table, column, term) with estimate, std_error, t, p, N, R2, fixed effects,
vcov and the LAP measure used; plus Table II's economic magnitudes (kind = magnitude),
the Table V bootstrap p-value (kind = bootstrap, from `bootstrap_results`) and notes on
skipped tables (kind = note). Logic: lookahead/paper/ (tables.py, analysis.py)."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")  # build only after the data-quality gate has passed

    from lookahead.paper.dbt_entry import paper_tables_frame

    return paper_tables_frame(
        dbt.ref("study_settings").df(),
        dbt.ref("panel_pre").df(),
        dbt.ref("panel_post").df(),
        boot=dbt.ref("bootstrap_results").df(),
    )
