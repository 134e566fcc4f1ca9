-- Valid rows excluded because one of their current LLM queries was refused for good: its
-- latest line in <task>.failures.jsonl is permanent (a 4xx other than 408/409/429, a
-- content refusal, a prompt the server rejects: no rerun changes the reply, so the jobs
-- record it once and ask again only with --retry-failed; llm_jobs.failures). Such a row
-- is an exclusion, not a block: it leaves the panel, rejected_rows lists it with this
-- reason, the report counts it, and gate_panel holds the share left against
-- min_measure_coverage. A transient failure is no exclusion: it stops the build at
-- query_issues until the jobs answer it. A refused recall pair excludes every row of
-- that (entity_id, target_date).
with failures as (

    select * from {{ ref('stg_query_failures') }}

),

expected as (

    select * from {{ ref('int_expected_keys') }}

),

observations as (

    select
        row_id,
        entity_id,
        cast(target_date as varchar) as target_date
    from {{ ref('int_observations_valid') }}

),

refused as (

    select
        expected.task,
        expected.row_id,
        expected.entity_id,
        expected.target_date,
        failures.reason
    from failures
    inner join expected
        on
            failures.key = expected.key
            and failures.task = expected.task
    where failures.permanent and not failures.answered

),

matched as (

    select
        observations.row_id,
        refused.task,
        refused.reason
    from observations
    inner join refused
        on
            refused.task != 'recall'
            and observations.row_id = refused.row_id
    union all
    select
        observations.row_id,
        refused.task,
        refused.reason
    from observations
    inner join refused
        on
            refused.task = 'recall'
            and observations.entity_id = refused.entity_id
            and observations.target_date = refused.target_date

)

select
    row_id,
    array_to_string(
        list_sort(list(distinct task || ' query refused for good (' || reason || ')')), '; '
    ) as exclude_reason
from matched
group by row_id
