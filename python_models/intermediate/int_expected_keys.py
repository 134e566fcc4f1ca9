"""dbt Python model: every cache key the current study asks for (lookahead.keys).

The staging lines a build uses are exactly those whose key is here: the key the jobs
computed for the same row or pair with the same prompt, parameters and model. Older
answers (another prompt, parameter, model or an edited row) stay cached, unused."""


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.keys import expected_keys_for_build

    # the relation, not a DataFrame: the package reads only the columns the keys need, as Arrow
    return expected_keys_for_build(dbt.ref("study_settings").df(), dbt.ref("stg_observations"))
