"""dbt Python model `claims_py` (claim-level leakage; see _claims__models.yml and docs/claims.md):
the dated claims with their Shapley values. Logic: lookahead/claims/tables.py claims_stage."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import stage

    return stage(
        "claims_py",
        dbt.ref("study_settings").df(),
        dated=dbt.ref("int_claims_dated"),
        shapley=dbt.ref("int_claim_shapley"),
    )
