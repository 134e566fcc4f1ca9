"""GX gate: one Min-K% score per row, from valid log-probs only (expectations/mink_scores.json)."""

from lookahead.gates import run_gate


def model(dbt, session):
    dbt.config(materialized="table")
    df = dbt.ref("int_mink_scores")  # a relation: run_gate converts only the checked columns
    return run_gate("gate_mink_scores", df, "mink_scores", id_column="mink_key")
