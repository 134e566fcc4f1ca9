"""dbt Python model `instance_leakage_py` (claim-level leakage; see _claims__models.yml and
docs/claims.md): OLR, Shapley-DCLR and top-k per instance. Logic: lookahead/claims/tables.py leakage_stage."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import stage

    return stage(
        "instance_leakage_py",
        dbt.ref("study_settings").df(),
        instances=dbt.ref("int_claim_instances"),
        dated=dbt.ref("int_claims_dated"),
        shapley=dbt.ref("int_claim_shapley"),
    )
