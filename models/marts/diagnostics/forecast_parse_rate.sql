-- Parse rate of the forecast answers (protocol step 1 sanity check: below 95% the
-- forecast job stops and shows unparsed examples).
select
    count(*) as n_rows,
    count(forecast_key) as n_responses,
    count(*) filter (where parse_status = 'parsed') as n_parsed,
    count(*) filter (where parse_status = 'unparsed') as n_unparsed,
    count(*) filter (where forecast_key is null) as n_missing,
    count(*) filter (where parse_status = 'parsed') / nullif(count(forecast_key), 0) as parse_rate
from {{ ref('int_panel_merged') }}
