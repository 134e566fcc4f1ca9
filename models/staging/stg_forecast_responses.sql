-- Forecast answers (protocol step 1) parsed with the user's label mapping (var
-- forecast_labels). Parser rule, shared with lookahead/scoring.py: the normalised
-- response (lowercase, non-alphanumerics to spaces) equals a label or starts with it
-- followed by a space; the longest matching label wins.
with source as (

    select * from {{ source('raw', 'forecast') }}
    where key is not null  -- a torn line reads as all-null; the job repairs it on rerun

),

responses as (

    select
        key,
        row_id,
        model_id,
        backend,
        response_text,
        {{ normalize_text('response_text') }} as response_norm,
        first_token_prob,
        stated_confidence,
        coalesce(approximated, false) as approximated,
        {{ is_current_line('forecast_prompt') }} as is_current,
        try_cast(finished_at as timestamp) as finished_at
    from source

),

labels as (

    select * from {{ forecast_label_values() }}

),

matches as (

    select
        responses.key,
        arg_max(labels.label, length(labels.label_norm)) as forecast_label,
        arg_max(labels.mu_hat, length(labels.label_norm)) as mu_hat
    from responses
    inner join labels
        on responses.response_norm = labels.label_norm
        or starts_with(responses.response_norm, labels.label_norm || ' ')
    group by responses.key

)

select
    responses.key,
    responses.row_id,
    responses.model_id,
    responses.backend,
    responses.response_text,
    matches.forecast_label,
    matches.mu_hat,
    case
        when responses.response_text is null then 'no response'
        when matches.forecast_label is null then 'unparsed'
        else 'parsed'
    end as parse_status,
    responses.first_token_prob,
    responses.stated_confidence,
    responses.approximated,
    responses.is_current,
    responses.finished_at
from responses
left join matches on responses.key = matches.key
