-- What the LLM queries of the current study lack, per task: queries with no answer (by
-- reason), forecast prompts whose text was cut to fit the model's context length
-- (setting prompt_overflow: truncate_text), and answers with log-probs in (0, 1e-4] that
-- the job read as 0 (a server's rounding of a near-certain token: lookahead.cache). A query without an answer is reported as
-- "no answer (reason)", never as a censored answer; gate_panel stops the build while
-- any remains, and rerunning the jobs retries them. A failure counts only while its key
-- is one the current study asks for (int_expected_keys) and no answer has been cached
-- under it since: a row deleted from the data, or asked again under a newer prompt, no
-- longer waits for it.
with failures as (

    select * from {{ ref('stg_query_failures') }}

),

expected as (

    select * from {{ ref('int_expected_keys') }}

),

forecasts as (

    select * from {{ ref('int_forecast_lines') }}

),

recall_answers as (

    select * from {{ ref('int_recall_pairs') }}

),

mink_answers as (

    select * from {{ ref('int_mink_scores') }}

),

open_failures as (

    select failures.*
    from failures
    inner join expected
        on failures.key = expected.key
        and failures.task = expected.task
    where not failures.answered

),

no_answer as (

    select
        task,
        'no answer (' || regexp_replace(reason, ' \(after [0-9]+ attempts\)$', '') || ')' as issue,
        count(*) as n_queries
    from open_failures
    where not coalesce(permanent, false)
    group by all

),

-- refused for good: no rerun changes these, so they exclude their rows (int_refused_rows)
-- instead of stopping the build
refused as (

    select
        task,
        'refused for good, row excluded (' || reason || ')' as issue,
        count(*) as n_queries
    from open_failures
    where coalesce(permanent, false)
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

),

clamped as (

    select 'forecast' as task, clamped_logprobs from forecasts
    union all
    select 'recall', clamped_logprobs from recall_answers
    union all
    select 'mink', clamped_logprobs from mink_answers

),

clamped_counts as (

    select
        task,
        'log-probs in (0, 1e-4] read as 0 (server rounding)' as issue,
        count(*) as n_queries
    from clamped
    where clamped_logprobs > 0
    group by task

)

select task, issue, n_queries from no_answer
union all
select task, issue, n_queries from refused
union all
select task, issue, n_queries from truncated
union all
select task, issue, n_queries from clamped_counts
