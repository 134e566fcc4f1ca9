"""dbt Python model `instance_leakage` (claim-level leakage; see _claims__models.yml and docs/claims.md).
Logic: lookahead/claims/tables.py."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import table

    staged = {  # the claim jobs' raw lines as staged (lookahead.claims.tables.STAGED_LINES)
        "extractions": dbt.ref("stg_claim_extractions"),
        "agents": dbt.ref("stg_claim_agent_answers"),
        "support": dbt.ref("stg_claim_support"),
        "values": dbt.ref("stg_claim_values"),
        "repredict": dbt.ref("stg_claim_repredictions"),
    }
    return table("instance_leakage", dbt.ref("study_settings").df(), staged)
