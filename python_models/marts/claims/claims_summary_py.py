"""dbt Python model `claims_summary_py` (claim-level leakage; see _claims__models.yml and
docs/claims.md): per agent and task. Logic: lookahead/claims/tables.py summarize."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import stage

    return stage(
        "claims_summary_py",
        dbt.ref("study_settings").df(),
        instance_leakage=dbt.ref("instance_leakage_py"),
        claims_repredict=dbt.ref("claims_repredict_py"),
    )
