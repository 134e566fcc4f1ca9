"""dbt Python model `claims_rejects_py` (claim-level leakage; see _claims__models.yml and
docs/claims.md): every input, line, claim and instance left out. Logic: lookahead/claims/tables.py
read_inputs and rejects_stage."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import stage

    return stage(
        "claims_rejects_py",
        dbt.ref("study_settings").df(),
        extractions=dbt.ref("stg_claim_extractions"),
        agents=dbt.ref("stg_claim_agent_answers"),
        support=dbt.ref("stg_claim_support"),
        values=dbt.ref("stg_claim_values"),
        repredict=dbt.ref("stg_claim_repredictions"),
        instances=dbt.ref("int_claim_instances"),
        dated=dbt.ref("int_claims_dated"),
        instance_leakage=dbt.ref("instance_leakage_py"),
    )
