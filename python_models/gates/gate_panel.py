"""GX gate on the analysis panel: merges kept the row count, regressors complete and in
range (expectations/panel.json, merge_row_counts.json). The regression models depend on
this gate, so a failure leaves them unbuilt."""

import pandas as pd

from lookahead.gates import run_gate


def model(dbt, session):
    dbt.config(materialized="table")
    # the row-level gates run first: a fan-out is reported at its cause
    dbt.ref("gate_forecasts")
    dbt.ref("gate_recall_pairs")
    counts = dbt.ref("merge_row_counts").df()
    panel = dbt.ref("panel")  # a relation: run_gate converts only the checked columns
    n_valid = int(counts.loc[counts["step"] == "valid rows", "n_rows"].iloc[0])
    merges = run_gate("gate_merge_row_counts", counts, "merge_row_counts", id_column="step")
    checks = run_gate(
        "gate_panel", panel, "panel", parameters={"n_valid_rows": n_valid}, id_column="row_id"
    )
    return pd.concat([merges, checks], ignore_index=True)
