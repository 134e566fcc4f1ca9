-- Forecast lines the current study uses: exactly those whose key is one the study asks
-- for (int_expected_keys) and whose fields agree with that key. A line that disagrees
-- with its key is listed in raw_line_rejects instead of being trusted.
with lines as (

    select * from {{ ref('stg_forecast_responses') }}

),

expected as (

    select * from {{ ref('int_expected_keys') }}
    where task = 'forecast'

)

select lines.*
from lines
inner join expected
    on lines.key = expected.key
where lines.task = 'forecast'
    and lines.fields_match
    and lines.row_id = expected.row_id
    and lines.model_id = {{ sql_string(setting('model_id')) }}
