"""dbt Python model `int_claim_instances`: every instance of the claim study with its
extraction (_claims__models.yml; docs/claims.md). Thin: the package reads the
predictions and validates the claims (lookahead.claims.tables.extract_stage)."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import stage

    return stage(
        "int_claim_instances",
        dbt.ref("study_settings").df(),
        extractions=dbt.ref("stg_claim_extractions"),
        agents=dbt.ref("stg_claim_agent_answers"),
    )
