-- Min-K% LAP of the current study's forecast prompts: the lines whose key the study asks
-- for (int_expected_keys) and whose fields agree with it, one per row_id expected.
with scores as (

    select * from {{ ref('stg_mink_scores') }}

),

expected as (

    select * from {{ ref('int_expected_keys') }}
    where task = 'mink'

)

select
    scores.key as mink_key,
    scores.row_id,
    scores.n_tokens,
    scores.k_tokens,
    scores.lap_mink,
    scores.lap_mink_geometric,
    scores.lap_mink_arithmetic,
    scores.n_invalid_logprobs,
    scores.clamped_logprobs
from scores
inner join expected
    on scores.key = expected.key
where scores.task = 'mink'
    and scores.fields_match
    and scores.row_id = expected.row_id
    and scores.model_id = {{ sql_string(setting('model_id')) }}
