"""The names of the report's tables: which database tables become CSVs, and the
regressions written one CSV each. Their own module so that the retire step
(lookahead.artefacts), which must recognise a report written before manifests, reads the
same names as the report (lookahead.report) without importing it."""

from __future__ import annotations

from lookahead.cutoff_report import CUTOFF_TABLES

# (spec, sample) -> CSV name; the protocol's tables in report order
REGRESSIONS = (
    ("validation_pooled", "pre"), ("validation_high_lap", "pre"), ("validation_low_lap", "pre"),
    ("validation_difference", "pre"), ("detection", "pre"),
    ("validation_pooled", "post"), ("validation_high_lap", "post"), ("validation_low_lap", "post"),
    ("validation_difference", "post"), ("detection", "post"),
)
TABLES = (
    "study_settings", "sample_description", "sample_period", "rejected_rows", "lap_distribution",
    "lap_histogram", "recall_censoring", "forecast_parse_rate", "merge_row_counts",
    "gx_validation_results", "regression_results", "verdict", "query_issues", "lap_robustness",
    *CUTOFF_TABLES,  # LAP by month, the effective cutoff and the cutoff sensitivity (docs/cutoff.md)
    # the claim tables (claim studies): the claim section and browser read them
    "claims", "instance_leakage", "claims_summary", "claims_repredict",
)
