"""GX gate: one forecast answer per row (expectations/forecasts.json)."""

from lookahead.gates import run_gate


def model(dbt, session):
    dbt.config(materialized="table")
    df = dbt.ref("int_forecasts")  # a relation: run_gate converts only the checked columns
    return run_gate("gate_forecasts", df, "forecasts", id_column="row_id")
