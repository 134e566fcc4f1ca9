"""dbt Python model `instance_leakage` (claim-level leakage; see _claims__models.yml and docs/claims.md).
Logic: lookahead/claims/tables.py."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import table

    return table("instance_leakage", dbt.ref("study_settings").df())
