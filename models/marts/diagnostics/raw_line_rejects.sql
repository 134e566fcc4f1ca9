-- Raw lines that carry a key the current study asks for but whose fields disagree with
-- it (another task, row, entity, date or model, or a query text or params that do not hash
-- to it: macros/study_helpers.sql fields_match): rejected, not trusted, with the reason.
-- The claim jobs' lines are read for a study with claim settings only: a study without
-- them asks no claim query, and its build leaves the claim staging out (docs/claims.md).
{%- set with_claims = study_has_claims() %}
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

),

protocol_rejects as (

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

){%- if with_claims %},

-- The claim jobs' lines (the claim staging models, the study's claim model) whose own
-- fields do not hash to their key: the key the job wrote cannot be rebuilt from them, so
-- the line answers no query the claim tables read (a line of another job's file, or one
-- whose query text or params were edited). A claim key is not derived from the study
-- here (the claim prompts are the package's), so the key's own ident is not known.
claim_lines as (

    {%- set claim_staging = {
        'claims_extract': 'stg_claim_extractions', 'claims_agents': 'stg_claim_agent_answers',
        'claims_support': 'stg_claim_support', 'claims_value': 'stg_claim_values',
        'claims_repredict': 'stg_claim_repredictions'} %}
    {%- for job, model in claim_staging.items() %}
    select
        key,
        {%- if job == 'claims_agents' %}
        case when task_order = 1 then 'claims_rationale' else 'claims_timespec' end as expected_task,
        {%- else %}
        {{ sql_string(job) }} as expected_task,
        {%- endif %}
        task,
        model_id,
        row_id as line_ident,
        null::varchar as key_ident
    from {{ ref(model) }}
    where not fields_match
    {%- if not loop.last %}
    union all
    {%- endif %}
    {%- endfor %}

){%- endif %}

select * from protocol_rejects
{%- if with_claims %}
union all
select
    key,
    expected_task,
    task,
    model_id,
    line_ident,
    key_ident,
    case
        when task is distinct from expected_task then 'task differs from the key'
        else 'query text or params do not hash to the key'
    end as reject_reason
from claim_lines
{%- endif %}
