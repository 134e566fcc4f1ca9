-- Min-K% LAP (paper eq. 1) from the prompt-token log-probabilities of each forecast
-- prompt: the lowest K% (var mink_k, K=0.2 in the paper; at least one token) of
-- log P(w_n | w_<n). The first prompt token has no conditional probability and is
-- skipped. geometric (paper eq. 1): exp(mean log-prob); arithmetic (the paper's table
-- notes, "averaging the token probabilities"): mean of the probabilities. Which one was
-- used is var mink_mean, recorded in study_settings. List functions work per line, so
-- no unnest, window or regrouping of the token rows is needed.
with source as (

    select * from {{ source('raw', 'mink') }}
    where key is not null

),

scored as (

    select
        *,
        list_sort(list_filter(
            list_transform(prompt_logprobs, lambda t: t.logprob),
            lambda lp: lp is not null
        )) as sorted_logprobs
    from source

),

lowest as (

    select
        *,
        len(sorted_logprobs) as n_tokens,
        list_slice(sorted_logprobs, 1, greatest(1, floor(len(sorted_logprobs) * {{ var('mink_k') }}))) as lowest_logprobs
    from scored

)

select
    key,
    task,
    row_id,
    model_id,
    backend,
    n_tokens,
    len(lowest_logprobs) as k_tokens,
    exp(list_avg(lowest_logprobs)) as lap_mink_geometric,
    list_avg(list_transform(lowest_logprobs, lambda lp: exp(lp))) as lap_mink_arithmetic,
    {%- if var('mink_mean') == 'arithmetic' %}
    list_avg(list_transform(lowest_logprobs, lambda lp: exp(lp))) as lap_mink,
    {%- else %}
    exp(list_avg(lowest_logprobs)) as lap_mink,
    {%- endif %}
    try_cast(finished_at as timestamp) as finished_at
from lowest
