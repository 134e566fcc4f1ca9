-- Date-only recall answers (protocol step 2) turned into label probabilities. This SQL
-- is THE implementation of the protocol's P(label) that reaches the regressions
-- (lookahead.scoring.label_probability is its test oracle):
--   1. returned entries without a token or a log-prob are dropped;
--   2. each token id counts once: the first entry with that id is kept (an entry with no
--      id is identified by its raw token text);
--   3. P(label) = sum of exp(logprob) over the kept entries whose token, stripped as
--      Python's str.strip does and lowercased, equals the label; no renormalisation;
--   4. a label absent from the kept entries is censored: its mass is unknown but below
--      the smallest returned probability (censor_bound); p_<label> is then the lower
--      bound 0 and <label>_censored is true.
-- Sampling-fallback lines (no logprobs) use answer frequencies instead and are marked
-- approximated. Lines answered with exact label probabilities (setting
-- recall_probabilities, docs/cutoff.md) carry label_logprobs, one entry per label role:
-- P(label) = exp(its logprob), read from the full next-token distribution (or by teacher
-- forcing for a multi-token label), never censored; probability_method says which way
-- each line's probabilities were obtained (exact | top_logprobs | sampling). n_invalid_logprobs counts NaN, infinite or positive log-probs in
-- top_logprobs; gate_recall_pairs requires it to be 0. List functions work per line, so
-- the tokens are never unnested and regrouped.
{%- set labels = setting('recall_labels') %}
with source as (

    select
        *,
        {{ fields_match('recall') }} as fields_match
    from {{ source('raw', 'recall') }}
    where key is not null

),

entries as (

    select
        *,
        coalesce(approximated, false) as is_sampled,
        coalesce(len(label_logprobs), 0) > 0 and not coalesce(approximated, false) as is_exact,
        list_transform(
            list_filter(top_logprobs, lambda t: t.token is not null and t.logprob is not null),
            lambda t: {'id': coalesce(cast(t.token_id as varchar), 'text:' || t.token),
                       'token': t.token, 'lowered': lower(t.token), 'logprob': t.logprob}
        ) as kept,
        list_transform(samples, lambda s: {{ py_strip_lower('s') }}) as answers,
        coalesce(len(list_filter(top_logprobs, lambda t: {{ is_invalid_logprob('t.logprob') }})), 0)
            as n_invalid_logprobs
    from source

),

ids as (

    select
        *,
        list_transform(kept, lambda t: t.id) as kept_ids
    from entries

),

tokens as (

    select
        *,
        -- first entry per token id (lines whose ids are all distinct skip the search)
        case
            when len(list_distinct(kept_ids)) = len(kept_ids) then kept
            else list_filter(kept, lambda t, i: list_position(kept_ids, t.id) = i)
        end as returned
    from ids

),

mass as (

    select
        *,
        {%- for name, label in labels.items() %}
        case
            when is_sampled then list_count(list_filter(answers, lambda a: a = {{ sql_string(label | trim | lower) }})) / len(answers)
            when is_exact then exp(list_filter(label_logprobs, lambda e: e.role = {{ sql_string(name) }})[1].logprob)
            -- contains() first (on the token lowered once for all labels): the full strip
            -- runs only on tokens that can match
            else list_sum(list_transform(list_filter(
                returned,
                lambda t: case
                    when contains(t.lowered, {{ sql_string(label | trim | lower) }})
                        then {{ py_strip_lower('t.token') }} = {{ sql_string(label | trim | lower) }}
                    else false
                end
            ), lambda t: exp(t.logprob)))
        end as p_{{ name }}_raw,
        {%- endfor %}
        case when is_sampled then len(answers) else len(returned) end as n_returned,
        case when is_sampled or is_exact then null else list_min(list_transform(returned, lambda t: exp(t.logprob))) end as censor_bound
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
    n_invalid_logprobs,
    coalesce(clamped_logprobs, 0) as clamped_logprobs,
    is_sampled as approximated,
    case when is_sampled then 'sampling' when is_exact then 'exact' else 'top_logprobs' end as probability_method,
    fields_match,
    try_cast(finished_at as timestamp) as finished_at
from mass
{{ first_written_line('mass') }}
