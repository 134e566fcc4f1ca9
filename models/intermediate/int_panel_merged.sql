-- Valid rows with their forecast (many-to-one on row_id), recall (many-to-one on
-- entity_id and target_date) and Min-K% score (on row_id). Row counts before and after
-- each merge are in `merge_row_counts` and checked by gate_panel.
with observations as (

    select * from {{ ref('int_observations_valid') }}

),

forecasts as (

    select * from {{ ref('int_forecasts') }}

),

recall as (

    select * from {{ ref('int_recall_pairs') }}

),

mink as (

    select * from {{ ref('int_mink_scores') }}

)

select
    observations.*,
    case
        when observations.target_date <= date {{ sql_string(var('training_cutoff')) }} then 'pre'
        else 'post'
    end as sample,
    {{ period_label('observations.target_date') }} as period,
    forecasts.forecast_key,
    forecasts.response_text,
    forecasts.forecast_label,
    forecasts.mu_hat,
    forecasts.parse_status,
    forecasts.first_token_prob,
    forecasts.stated_confidence,
    recall.recall_key,
    recall.p_up,
    recall.p_down,
    recall.p_unknown,
    recall.up_censored,
    recall.down_censored,
    recall.unknown_censored,
    recall.residual_mass,
    recall.ud,
    recall.lap as lap_recall,
    mink.mink_key,
    mink.lap_mink,
    {%- if var('lap_measure') == 'mink' %}
    mink.lap_mink as lap,
    {%- else %}
    recall.lap as lap,
    {%- endif %}
    coalesce(forecasts.approximated, false) or coalesce(recall.approximated, false) as approximated
from observations
left join forecasts on observations.row_id = forecasts.row_id
left join recall
    on observations.entity_id = recall.entity_id
    and observations.target_date = recall.target_date
left join mink on observations.row_id = mink.row_id
