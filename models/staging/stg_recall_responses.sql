-- Date-only recall answers (protocol step 2) turned into label probabilities.
-- P(label) = sum of exp(logprob) over the returned top-k tokens whose decoded text,
-- stripped and lowercased, equals the label; each token id counted once; no
-- renormalisation. A label absent from the returned tokens is censored: its mass is
-- unknown but below the smallest returned probability (censor_bound); p_<label> is then
-- the lower bound 0 and <label>_censored is true. Sampling-fallback lines (no logprobs)
-- use answer frequencies instead and are marked approximated.
{%- set labels = var('recall_labels') %}
with source as (

    select * from {{ source('raw', 'recall') }}
    where key is not null

),

lines as (

    select
        key,
        entity_id,
        try_cast(target_date as date) as target_date,
        model_id,
        backend,
        response_text,
        top_logprobs,
        samples,
        coalesce(approximated, false) as approximated,
        {{ is_current_line('recall_template') }} as is_current,
        try_cast(finished_at as timestamp) as finished_at
    from source

),

returned_tokens as (

    select
        key,
        token.token_id,
        token.token,
        lower(trim(token.token)) as token_text,
        token.logprob
    from lines, unnest(top_logprobs) as t(token)
    where not approximated

),

distinct_tokens as (

    -- one entry per token id (per raw token string where the server gave no ids)
    select
        key,
        token_text,
        max(logprob) as logprob
    from returned_tokens
    group by key, coalesce(cast(token_id as varchar), 'text:' || token), token_text

),

logprob_mass as (

    select
        key,
        count(*) as n_returned,
        min(exp(logprob)) as censor_bound,
        {%- for name, label in labels.items() %}
        sum(exp(logprob)) filter (where token_text = {{ sql_string(label | lower) }}) as p_{{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
    from distinct_tokens
    group by key

),

sample_answers as (

    select
        key,
        lower(trim(answer)) as answer
    from lines, unnest(samples) as s(answer)
    where approximated

),

sample_mass as (

    select
        key,
        count(*) as n_returned,
        cast(null as double) as censor_bound,
        {%- for name, label in labels.items() %}
        avg(case when answer = {{ sql_string(label | lower) }} then 1.0 else 0.0 end) as p_{{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
    from sample_answers
    group by key

),

mass as (

    select * from logprob_mass
    union all by name
    select * from sample_mass

)

select
    lines.key,
    lines.entity_id,
    lines.target_date,
    lines.model_id,
    lines.backend,
    lines.response_text,
    coalesce(mass.n_returned, 0) as n_returned,
    {%- for name in labels %}
    coalesce(mass.p_{{ name }}, 0) as p_{{ name }},
    mass.p_{{ name }} is null as {{ name }}_censored,
    {%- endfor %}
    coalesce(mass.p_up, 0) + coalesce(mass.p_down, 0) as lap,
    coalesce(mass.p_up, 0) - coalesce(mass.p_down, 0) as ud,
    1 - (coalesce(mass.p_up, 0) + coalesce(mass.p_down, 0) + coalesce(mass.p_unknown, 0)) as residual_mass,
    mass.censor_bound,
    lines.approximated,
    lines.is_current,
    lines.finished_at
from lines
left join mass on lines.key = mass.key
