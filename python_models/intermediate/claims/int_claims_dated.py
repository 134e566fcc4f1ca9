"""dbt Python model `int_claims_dated`: every extracted claim dated against the corpus
(_claims__models.yml; docs/claims.md). Thin: BM25 retrieval, support and Eq. 3 are the
package's (lookahead.claims.tables.date_stage)."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.claims.dbt_entry import stage

    return stage(
        "int_claims_dated",
        dbt.ref("study_settings").df(),
        instances=dbt.ref("int_claim_instances"),
        support=dbt.ref("stg_claim_support"),
    )
