-- Raw lines that carry a key the current study asks for but whose fields disagree with
-- it (another task, row, entity, date or model, or a query text or params that do not hash
-- to it: macros/study_helpers.sql fields_match): rejected, not trusted, with the reason.
with lines as (

    select key, task, model_id, row_id, null as entity_id, null as target_date, fields_match
    from {{ ref('stg_forecast_responses') }}
    union all
    select key, task, model_id, row_id, null, null, fields_match
    from {{ ref('stg_mink_scores') }}
    union all
    select key, task, model_id, null, entity_id, strftime(target_date, '%Y-%m-%d'), fields_match
    from {{ ref('stg_recall_responses') }}

),

expected as (

    select * from {{ ref('int_expected_keys') }}

)

select
    lines.key,
    expected.task as expected_task,
    lines.task,
    lines.model_id,
    coalesce(lines.row_id, lines.entity_id || '|' || lines.target_date) as line_ident,
    coalesce(expected.row_id, expected.entity_id || '|' || expected.target_date) as key_ident,
    case
        when lines.task is distinct from expected.task then 'task differs from the key'
        when lines.model_id is distinct from {{ sql_string(setting('model_id')) }} then 'model_id differs from the key'
        when coalesce(lines.row_id, '') is distinct from coalesce(expected.row_id, '')
            or coalesce(lines.entity_id, '') is distinct from coalesce(expected.entity_id, '')
            or coalesce(lines.target_date, '') is distinct from coalesce(expected.target_date, '')
            then 'row or (entity, date) differs from the key'
        else 'query text or params do not hash to the key'
    end as reject_reason
from lines
inner join expected
    on lines.key = expected.key
where not lines.fields_match
    or lines.task is distinct from expected.task
    or lines.model_id is distinct from {{ sql_string(setting('model_id')) }}
    or coalesce(lines.row_id, '') is distinct from coalesce(expected.row_id, '')
    or coalesce(lines.entity_id, '') is distinct from coalesce(expected.entity_id, '')
    or coalesce(lines.target_date, '') is distinct from coalesce(expected.target_date, '')
