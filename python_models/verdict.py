"""dbt Python model: the verdict by the protocol's decision rule (one row).

Reads the regression results and the panels (for LAP variation and censoring facts);
the rule itself is lookahead.stats.verdict. The row carries the build's identity
(`build_identity`), which `lookahead report` checks against the study as it is now."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")

    from lookahead.identity import with_identity
    from lookahead.stats.protocol import StatsSettings
    from lookahead.stats.verdict import verdict_frame

    settings = StatsSettings.from_frame(dbt.ref("study_settings").df())
    results = dbt.ref("regression_results").df()
    panel_pre = dbt.ref("panel_pre").df()
    panel_post = dbt.ref("panel_post").df()
    return with_identity(verdict_frame(results, panel_pre, panel_post, settings),
                         dbt.ref("build_identity").df())
