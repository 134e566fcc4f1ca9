-- Forecast answers of the current study (model and prompt), one per row_id expected;
-- a second line for a row would fan out the merge and stop the build at gate_panel.
select
    key as forecast_key,
    row_id,
    response_text,
    forecast_label,
    mu_hat,
    parse_status,
    first_token_prob,
    stated_confidence,
    approximated
from {{ ref('stg_forecast_responses') }}
where is_current
