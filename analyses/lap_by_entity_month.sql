-- LAP by entity and month of the realization date, pre and post cutoff: where the
-- model's recall is concentrated. Compile with `dbt compile --select lap_by_entity_month`
-- and run the SQL in target/compiled/lookahead_bias/analyses/ against the study database.
with panel as (

    select * from {{ ref('panel') }}

)

select
    entity_id,
    entity_name,
    strftime(target_date, '%Y-%m') as target_month,
    sample,
    count(*) as n_rows,
    avg(lap) as mean_lap,
    avg(lap_recall) as mean_lap_recall,
    avg(lap_mink) as mean_lap_mink,
    avg(high_lap) as share_high_lap,
    avg(case when up_censored and down_censored then 1.0 else 0.0 end) as share_both_censored
from panel
group by entity_id, entity_name, strftime(target_date, '%Y-%m'), sample
order by entity_id, target_month
