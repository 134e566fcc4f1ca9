-- What the LLM queries of the current study (keys in int_expected_keys) lack, per task: queries with no answer (by
-- reason) and forecast prompts whose text was cut to fit the model's context length
-- (setting prompt_overflow: truncate_text). A query without an answer is reported as
-- "no answer (reason)", never as a censored answer; gate_panel stops the build while
-- any remains, and rerunning the jobs retries them.
with failures as (

    select * from {{ ref('stg_query_failures') }}
    where not answered
        and key in (select key from {{ ref('int_expected_keys') }})

),

forecasts as (

    select * from {{ ref('int_forecast_lines') }}

),

no_answer as (

    select
        task,
        'no answer (' || regexp_replace(reason, ' \(after [0-9]+ attempts\)$', '') || ')' as issue,
        count(*) as n_queries
    from failures
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
