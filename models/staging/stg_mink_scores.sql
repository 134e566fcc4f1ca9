-- Min-K% LAP (paper eq. 1) from the prompt-token log-probabilities of each forecast
-- prompt: the lowest K% (var mink_k, K=0.2 in the paper; at least one token) of
-- log P(w_n | w_<n). The first prompt token has no conditional probability and is
-- skipped. geometric (paper eq. 1): exp(mean log-prob); arithmetic (the paper's table
-- notes, "averaging the token probabilities"): mean of the probabilities. Which one was
-- used is var mink_mean, recorded in study_settings.
with source as (

    select * from {{ source('raw', 'mink') }}
    where key is not null

),

tokens as (

    select
        source.key,
        token.logprob,
        position
    from source, unnest(prompt_logprobs) with ordinality as t(token, position)
    where token.logprob is not null

),

ranked as (

    select
        key,
        logprob,
        row_number() over (partition by key order by logprob, position) as rank_low,
        count(*) over (partition by key) as n_tokens
    from tokens

),

lowest as (

    select
        key,
        any_value(n_tokens) as n_tokens,
        count(*) as k_tokens,
        exp(avg(logprob)) as lap_mink_geometric,
        avg(exp(logprob)) as lap_mink_arithmetic
    from ranked
    where rank_low <= greatest(1, floor(n_tokens * {{ var('mink_k') }}))
    group by key

)

select
    source.key,
    source.row_id,
    source.model_id,
    source.backend,
    lowest.n_tokens,
    lowest.k_tokens,
    lowest.lap_mink_geometric,
    lowest.lap_mink_arithmetic,
    {%- if var('mink_mean') == 'arithmetic' %}
    lowest.lap_mink_arithmetic as lap_mink,
    {%- else %}
    lowest.lap_mink_geometric as lap_mink,
    {%- endif %}
    {{ is_current_line('forecast_prompt') }} as is_current,
    try_cast(source.finished_at as timestamp) as finished_at
from source
left join lowest on source.key = lowest.key
