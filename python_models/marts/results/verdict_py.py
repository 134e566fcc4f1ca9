"""dbt Python model: the verdict by the protocol's decision rule (one row).

Reads the regression results and the panels (for LAP variation and censoring facts);
the rule itself is lookahead.stats.verdict. The row carries the build's identity
(`build_identity`), which `lookahead report` checks against the study as it is now."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")

    from lookahead.identity import with_identity
    from lookahead.stats.panel_io import read_columns
    from lookahead.stats.protocol import StatsSections
    from lookahead.stats.verdict import VERDICT_COLUMNS, verdict_frame

    settings = StatsSections.from_frame(dbt.ref("study_settings").df())
    results = dbt.ref("regression_results").df()
    panel_pre = read_columns(dbt.ref("panel_pre"), VERDICT_COLUMNS)
    panel_post = read_columns(dbt.ref("panel_post"), VERDICT_COLUMNS)
    return with_identity(verdict_frame(results, panel_pre, panel_post, settings), dbt.ref("build_identity").df())
