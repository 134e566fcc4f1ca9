-- Recall answers of the current study, one per (entity_id, target_date): the jobs query
-- each pair once, so a duplicate here is a cache fault and fails gate_recall_pairs.
select
    key as recall_key,
    entity_id,
    target_date,
    p_up,
    p_down,
    p_unknown,
    up_censored,
    down_censored,
    unknown_censored,
    lap,
    ud,
    residual_mass,
    censor_bound,
    n_returned,
    n_invalid_logprobs,
    approximated
from {{ ref('stg_recall_responses') }}
where is_current
