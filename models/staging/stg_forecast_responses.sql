-- Forecast answers (protocol step 1) as returned, typed; which lines the current study
-- uses is decided by key in int_forecast_lines. The answer is mapped to a label in
-- int_forecasts with the package's parser, the same code the forecast job uses for its
-- parse-rate check, so the two can never disagree.
with source as (

    select
        *,
        {{ fields_match('forecast') }} as fields_match
    from {{ source('raw', 'forecast') }}
    where key is not null  -- a torn line reads as all-null; the job repairs it on rerun

)

select
    key,
    task,
    row_id,
    model_id,
    backend,
    response_text,
    first_token_prob,
    stated_confidence,
    coalesce(approximated, false) as approximated,
    try_cast(json_extract_string(params, '$.text_truncated_to_chars') as integer) as text_truncated_to_chars,
    coalesce(clamped_logprobs, 0) as clamped_logprobs,
    fields_match,
    try_cast(finished_at as timestamp) as finished_at
from source
{{ first_written_line('source') }}
