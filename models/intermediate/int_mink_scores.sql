-- Min-K% LAP of the current study's forecast prompts, one per row_id expected.
select
    key as mink_key,
    row_id,
    n_tokens,
    k_tokens,
    lap_mink,
    lap_mink_geometric,
    lap_mink_arithmetic,
    n_invalid_logprobs
from {{ ref('stg_mink_scores') }}
where is_current
