-- What the LLM queries of the current study (keys in int_expected_keys) lack, per task: queries with no answer (by
-- reason) and forecast prompts whose text was cut to fit the model's context length
-- (setting prompt_overflow: truncate_text). A query without an answer is reported as
-- "no answer (reason)", never as a censored answer; gate_panel stops the build while
-- any remains, and rerunning the jobs retries them. A failure counts only while its
-- row (forecast, Min-K%) or (entity_id, target_date) pair (recall) is a valid input row
-- without a current answer: a row deleted from the data, or answered under a newer
-- prompt, no longer waits for it.
with failures as (

    select * from {{ ref('stg_query_failures') }}
    where not answered
        and key in (select key from {{ ref('int_expected_keys') }})

),

observations as (

    select * from {{ ref('int_observations_valid') }}

),

forecasts as (

    select * from {{ ref('int_forecast_lines') }}

),

recall as (

    select * from {{ ref('stg_recall_responses') }}
    where is_current

),

mink as (

    select * from {{ ref('stg_mink_scores') }}
    where is_current

),

open_failures as (

    select failures.*
    from failures
    where (failures.task = 'forecast'
            and failures.row_id in (select row_id from observations)
            and failures.row_id not in (select row_id from forecasts))
        or (failures.task = 'mink'
            and failures.row_id in (select row_id from observations)
            and failures.row_id not in (select row_id from mink))
        or (failures.task = 'recall'
            and (failures.entity_id, try_cast(failures.target_date as date)) in
                (select (entity_id, target_date) from observations)
            and (failures.entity_id, try_cast(failures.target_date as date)) not in
                (select (entity_id, target_date) from recall))

),

no_answer as (

    select
        task,
        'no answer (' || regexp_replace(reason, ' \(after [0-9]+ attempts\)$', '') || ')' as issue,
        count(*) as n_queries
    from open_failures
    group by all

),

truncated as (

    select
        'forecast' as task,
        'prompt text truncated to fit the context length' as issue,
        count(*) as n_queries
    from forecasts
    where text_truncated_to_chars is not null
    having count(*) > 0

)

select task, issue, n_queries from no_answer
union all
select task, issue, n_queries from truncated
