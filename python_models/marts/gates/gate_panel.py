"""GX gate on the analysis panel: merges kept the row count, regressors complete and in
range, and enough of it: at least min_panel_rows rows and some pre-cutoff
(expectations/panel.json, merge_row_counts.json). The regression models depend on
this gate, so a failure leaves them unbuilt.

Three study facts reach the checks here: queries the LLM jobs could not answer yet
(query_issues) stop the build with a message naming them, before any other check, so a
missing answer is never read as a censored one; rows whose query was refused for good
(int_refused_rows) are excluded, and stop the build only when the share left is under
min_measure_coverage; and accept_low_parse_rate lowers the
parse-rate floor (panel.json's min_parse_rate) from the protocol's 95% to 0. A failure
while raw_line_rejects holds lines says so: those answers were not used."""

import pandas as pd

from lookahead.coverage import coverage_failures
from lookahead.gates import GateFailed, check_exclusions, check_no_missing_answers, min_parse_rate, run_gate
from lookahead.stats.protocol import study_from_frame


def model(dbt, session):
    dbt.config(materialized="table")
    # the row-level gates run first: a fan-out is reported at its cause
    dbt.ref("gate_forecasts")
    dbt.ref("gate_recall_pairs")
    dbt.ref("gate_mink_scores")
    check_no_missing_answers(dbt.ref("query_issues").df())
    settings = dbt.ref("study_settings").df()
    counts = dbt.ref("merge_row_counts").df()
    panel = dbt.ref("panel")  # a relation: run_gate converts only the checked columns
    study = study_from_frame(settings)
    # rows with an LLM query refused for good are excluded, not a block: the share left is
    # held against min_measure_coverage, and the panel keeps the valid rows less those
    n_valid = int(counts.loc[counts["step"] == "valid rows", "n_rows"].iloc[0])
    check_exclusions(n_valid, dbt.ref("int_refused_rows").df(), float(study.measures.min_measure_coverage))
    n_valid = int(counts.loc[counts["step"] == "panel", "n_expected"].iloc[0])
    # every measure the study asks for scores its rows, or the build names it (lookahead.coverage)
    # a measure's raw lines, opened only for a measure under its floor (a study without the
    # reference model has no reference file to open)
    sources = {
        "recall": lambda: dbt.source("raw", "recall"),
        "mink": lambda: dbt.source("raw", "mink"),
        "reference": lambda: dbt.source("raw", "reference"),
    }
    missing_measures = coverage_failures(study, panel, lambda task: sources[task](), dbt.ref("int_expected_keys"))
    if missing_measures:
        raise GateFailed("GX gate 'gate_panel' stopped: " + "; ".join(missing_measures))
    rejects = dbt.ref("raw_line_rejects")  # a statement of its own: dbt's parser finds the ref
    # the protocol's lines (a claim line that disagrees with its key is no panel answer)
    rejected = int(rejects.filter("expected_task not like 'claims%'").aggregate("count(*)").fetchone()[0])
    try:
        merges = run_gate("gate_merge_row_counts", counts, "merge_row_counts", id_column="step")
        checks = run_gate(
            "gate_panel",
            panel,
            "panel",
            id_column="row_id",
            parameters={
                "n_valid_rows": n_valid,
                "min_parse_rate": min_parse_rate(study),
                "min_panel_rows": study.protocol.min_panel_rows,
            },
        )
    except GateFailed as exc:
        if not rejected:
            raise
        # a cached line whose fields disagree with its key is no answer: the jobs ask it again
        raise GateFailed(
            f"{exc}; {rejected} cached line(s) disagree with their key and were not "
            "used (table raw_line_rejects): run the LLM jobs again, they ask those "
            "queries again"
        ) from None
    return pd.concat([merges, checks], ignore_index=True)
