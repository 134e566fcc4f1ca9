"""dbt Python model `int_claim_shapley`: each scored instance's coalition values and
Shapley values (_claims__models.yml; docs/claims.md). Thin: the task kind's v(S) and
Eq. 2 are the package's (lookahead.claims.tables.shapley_stage)."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import stage

    return stage(
        "int_claim_shapley",
        dbt.ref("study_settings").df(),
        instances=dbt.ref("int_claim_instances"),
        answers=dbt.ref("int_claim_coalition_answers"),
    )
