-- Row counts before and after each many-to-one merge; gate_panel requires them equal.
-- The panel holds the valid rows less those excluded because an LLM query was refused
-- for good (int_refused_rows; gate_panel holds that share against min_measure_coverage).
with valid as (

    select count(*) as n from {{ ref('int_observations_valid') }}

),

with_forecast as (

    select count(*) as n
    from {{ ref('int_observations_valid') }} as observations
    left join {{ ref('int_forecasts') }} as forecasts on observations.row_id = forecasts.row_id

),

with_recall as (

    select count(*) as n
    from {{ ref('int_observations_valid') }} as observations
    left join {{ ref('int_recall_pairs') }} as recall
        on observations.entity_id = recall.entity_id
        and observations.target_date = recall.target_date

),

with_mink as (

    select count(*) as n
    from {{ ref('int_observations_valid') }} as observations
    left join {{ ref('int_mink_scores') }} as mink on observations.row_id = mink.row_id

),

refused as (

    select count(*) as n from {{ ref('int_refused_rows') }}

),

merged as (

    select count(*) as n from {{ ref('int_panel_merged') }}

)

select 'valid rows' as step, 1 as step_order, valid.n as n_rows, valid.n as n_expected from valid
union all
select 'merge forecast on row_id', 2, with_forecast.n, valid.n from with_forecast, valid
union all
select 'merge recall on (entity_id, target_date)', 3, with_recall.n, valid.n from with_recall, valid
union all
select 'merge Min-K% on row_id', 4, with_mink.n, valid.n from with_mink, valid
union all
select 'panel', 5, merged.n, valid.n - refused.n from merged, valid, refused
