"""The names of the files the report writes: which database tables become CSVs, the
regressions written one CSV each, and the paper's LaTeX tables. Their own module, in the
bottom layer, so that the retire step (lookahead.artefacts), which must recognise a
report written before manifests, reads the same names as the report (lookahead.pages)
without importing a layer above it (docs/CONTRACTS.md, "The package by layer")."""

from __future__ import annotations

#: the effective-cutoff marts the report's cutoff section reads (docs/cutoff.md)
CUTOFF_TABLES = ("lap_by_period", "effective_cutoff", "cutoff_sensitivity")
#: Table V's facts beside the verdict (lookahead.paper.table5_reading), one CSV
TABLE5_READING = "table5_reading"
#: the paper's tables, each written to tables/<name>.tex (lookahead.pages.paper)
PAPER_TABLES = ("table2", "table3", "table4", "table5", "table6")

# (spec, sample) -> CSV name; the protocol's tables in report order
REGRESSIONS = (
    ("validation_pooled", "pre"),
    ("validation_high_lap", "pre"),
    ("validation_low_lap", "pre"),
    ("validation_difference", "pre"),
    ("detection", "pre"),
    ("validation_pooled", "post"),
    ("validation_high_lap", "post"),
    ("validation_low_lap", "post"),
    ("validation_difference", "post"),
    ("detection", "post"),
)
TABLES = (
    "study_settings",
    "sample_description",
    "sample_period",
    "rejected_rows",
    "lap_distribution",
    "lap_histogram",
    "recall_censoring",
    "forecast_parse_rate",
    "merge_row_counts",
    "gx_validation_results",
    "regression_results",
    "verdict",
    "query_issues",
    "lap_robustness",
    *CUTOFF_TABLES,  # LAP by month, the effective cutoff and the cutoff sensitivity (docs/cutoff.md)
    # the claim tables (claim studies): the claim section and browser read them
    "claims",
    "instance_leakage",
    "claims_summary",
    "claims_repredict",
)
