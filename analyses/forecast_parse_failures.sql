-- Forecast answers that did not map to a label (parse_status 'unparsed' or 'no
-- response'), with the input row they belong to: read them to decide whether the
-- prompt or the label mapping (forecast_labels) needs changing.
with forecasts as (

    select * from {{ ref('int_forecasts') }}

),

observations as (

    select * from {{ ref('int_observations_valid') }}

)

select
    forecasts.parse_status,
    observations.row_id,
    observations.entity_id,
    observations.text_date,
    observations.text,
    forecasts.response_text
from forecasts
inner join observations on forecasts.row_id = observations.row_id
where forecasts.parse_status != 'parsed'
order by forecasts.parse_status, observations.text_date, observations.row_id
