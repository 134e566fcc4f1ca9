"""GX gate on the analysis panel: merges kept the row count, regressors complete and in
range, and enough of it: at least min_panel_rows rows and some pre-cutoff
(expectations/panel.json, merge_row_counts.json). The regression models depend on
this gate, so a failure leaves them unbuilt."""

import pandas as pd

from lookahead.gates import run_gate


def model(dbt, session):
    dbt.config(materialized="table")
    # the row-level gates run first: a fan-out is reported at its cause
    dbt.ref("gate_forecasts")
    dbt.ref("gate_recall_pairs")
    dbt.ref("gate_mink_scores")
    counts = dbt.ref("merge_row_counts").df()
    panel = dbt.ref("panel").df()
    n_valid = int(counts.loc[counts["step"] == "valid rows", "n_rows"].iloc[0])
    settings = dbt.ref("study_settings").df()
    from lookahead.config import Study

    study = Study.from_json(str(settings["settings_json"].iloc[0]))
    merges = run_gate("gate_merge_row_counts", counts, "merge_row_counts", id_column="step")
    checks = run_gate(
        "gate_panel", panel, "panel", parameters={"n_valid_rows": n_valid, "min_panel_rows": study["min_panel_rows"]}, id_column="row_id"
    )
    return pd.concat([merges, checks], ignore_index=True)
