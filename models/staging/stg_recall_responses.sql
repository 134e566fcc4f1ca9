-- Date-only recall answers (protocol step 2) turned into label probabilities.
-- P(label) = sum of exp(logprob) over the returned top-k tokens whose decoded text,
-- stripped and lowercased, equals the label; each token id counted once; no
-- renormalisation. A label absent from the returned tokens is censored: its mass is
-- unknown but below the smallest returned probability (censor_bound); p_<label> is then
-- the lower bound 0 and <label>_censored is true. Sampling-fallback lines (no logprobs)
-- use answer frequencies instead and are marked approximated. List functions work per
-- line, so the tokens are never unnested and regrouped.
{%- set labels = var('recall_labels') %}
with source as (

    select * from {{ source('raw', 'recall') }}
    where key is not null

),

tokens as (

    select
        *,
        coalesce(approximated, false) as is_sampled,
        -- one entry per token id (per raw token string where the server gave no ids)
        list_distinct(list_transform(
            top_logprobs,
            lambda t: {'id': coalesce(cast(t.token_id as varchar), 'text:' || t.token),
                       'text': lower(trim(t.token)), 'p': exp(t.logprob)}
        )) as returned,
        list_transform(samples, lambda s: lower(trim(s))) as answers
    from source

),

mass as (

    select
        *,
        {%- for name, label in labels.items() %}
        case
            when is_sampled then list_count(list_filter(answers, lambda a: a = {{ sql_string(label | lower) }})) / len(answers)
            else list_sum(list_transform(list_filter(returned, lambda t: t.text = {{ sql_string(label | lower) }}), lambda t: t.p))
        end as p_{{ name }}_raw,
        {%- endfor %}
        case when is_sampled then len(answers) else len(returned) end as n_returned,
        case when is_sampled then null else list_min(list_transform(returned, lambda t: t.p)) end as censor_bound
    from tokens

)

select
    key,
    task,
    entity_id,
    try_cast(target_date as date) as target_date,
    model_id,
    backend,
    response_text,
    coalesce(n_returned, 0) as n_returned,
    {%- for name in labels %}
    coalesce(p_{{ name }}_raw, 0) as p_{{ name }},
    p_{{ name }}_raw is null as {{ name }}_censored,
    {%- endfor %}
    coalesce(p_up_raw, 0) + coalesce(p_down_raw, 0) as lap,
    coalesce(p_up_raw, 0) - coalesce(p_down_raw, 0) as ud,
    1 - (coalesce(p_up_raw, 0) + coalesce(p_down_raw, 0) + coalesce(p_unknown_raw, 0)) as residual_mass,
    censor_bound,
    is_sampled as approximated,
    try_cast(finished_at as timestamp) as finished_at
from mass
