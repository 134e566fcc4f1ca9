"""dbt Python model `claims_repredict` (the re-prediction check; see _claims.yml and
docs/claims.md). Logic: lookahead/claims/tables.py."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import table

    return table("claims_repredict", dbt.ref("study_settings").df())
