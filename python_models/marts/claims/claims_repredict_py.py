"""dbt Python model `claims_repredict_py` (the re-prediction check; see _claims__models.yml and
docs/claims.md). Logic: lookahead/claims/tables.py repredict_table."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import stage

    return stage(
        "claims_repredict_py",
        dbt.ref("study_settings").df(),
        instances=dbt.ref("int_claim_instances"),
        repredict=dbt.ref("stg_claim_repredictions"),
    )
