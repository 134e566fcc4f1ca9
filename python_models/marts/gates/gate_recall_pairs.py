"""GX gate: one recall answer per (entity_id, target_date) (expectations/recall_pairs.json)."""

from lookahead.gates import run_gate


def model(dbt, session):
    dbt.config(materialized="table")
    df = dbt.ref("int_recall_pairs")  # a relation: run_gate converts only the checked columns
    return run_gate("gate_recall_pairs", df, "recall_pairs", id_column="recall_key")
