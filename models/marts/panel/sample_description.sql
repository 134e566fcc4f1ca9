-- Sample description for the report (protocol final report, section 1), as
-- (metric, value) rows: input, rejects by reason, pre/post, entities, periods.
with observations as (

    select * from {{ ref('stg_observations') }}

),

panel as (

    select * from {{ ref('panel') }}

),

metrics as (

    select 'input rows' as metric, 1 as metric_order, count(*) as value from observations
    union all
    select 'rejected rows', 2, count(*) from observations where reject_reason is not null
    union all
    select 'rejected: ' || reject_reason, 3, count(*) from observations
    where reject_reason is not null group by reject_reason
    union all
    select 'valid rows', 4, count(*) from panel
    union all
    select 'valid rows outside the subsample', 14, count(*) from observations
    where reject_reason is null and not in_subsample
    union all
    select 'pre-cutoff rows', 5, count(*) from panel where sample = 'pre'
    union all
    select 'post-cutoff rows', 6, count(*) from panel where sample = 'post'
    union all
    select 'entities', 7, count(distinct entity_id) from panel
    union all
    select 'pre-cutoff entities', 8, count(distinct entity_id) from panel where sample = 'pre'
    union all
    select 'post-cutoff entities', 9, count(distinct entity_id) from panel where sample = 'post'
    union all
    select 'periods', 10, count(distinct period) from panel
    union all
    select 'recall pairs (entity, target_date)', 11, count(distinct recall_key) from panel
    union all
    select 'rows without a forecast', 12, count(*) from panel where forecast_key is null
    union all
    select 'rows with an unparsed forecast', 13, count(*) from panel where parse_status = 'unparsed'
    union all
    select 'rows excluded: an LLM query refused for good', 15, count(*) from {{ ref('int_refused_rows') }}

)

select
    metric,
    metric_order,
    cast(value as bigint) as value
from metrics
