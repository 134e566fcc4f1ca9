-- Queries the LLM jobs could not get a complete answer for (<raw_dir>/**/<task>.failures.jsonl),
-- one row per key: its latest reason, whether no retry changes it (permanent: the jobs
-- ask it again only with --retry-failed, and int_refused_rows excludes its row), and
-- whether the key has been answered since. A missing answer must never be read as a censored
-- one, so query_issues counts the unanswered keys and gate_panel stops on them.
-- Whether a key was answered is read from the task's staged lines where it has a staging
-- model (each raw file is parsed once, there), else from its raw file's keys.
{%- set staged = {'forecast': 'stg_forecast_responses', 'recall': 'stg_recall_responses', 'mink': 'stg_mink_scores'} %}
{%- set tasks = ['forecast', 'recall', 'mink', 'reference'] %}
{%- set answers = {} %}
{%- set present = {} %}
{%- for task in tasks %}
  {%- set relation = source('raw_failures', task) %}
  {#- lineage: read below only where the failures file exists #}
  {%- do answers.update({task: ref(staged[task]) if task in staged else source('raw', task)}) %}
  {%- if execute %}
    {%- do present.update({task: raw_file_count(task ~ '.failures.jsonl') > 0}) %}
  {%- endif %}
{%- endfor %}
with

{%- for task in tasks %}
{{ task }}_failures as (

    {%- if present.get(task) %}
    select
        key,
        {{ sql_string(task) }} as task,
        model_id,
        row_id,
        entity_id,
        target_date,
        reason,
        attempts,
        try_cast(failed_at as timestamp) as failed_at,
        coalesce(permanent, false) as permanent,
        key in (select key from {{ answers[task] }} where key is not null
                {{- ' and fields_match' if task in staged }}) as answered
    from {{ source('raw_failures', task) }}
    where key is not null
    {%- else %}
    select
        null::varchar as key, null::varchar as task, null::varchar as model_id,
        null::varchar as row_id, null::varchar as entity_id, null::varchar as target_date,
        null::varchar as reason, null::integer as attempts, null::timestamp as failed_at,
        null::boolean as permanent, null::boolean as answered
    where false
    {%- endif %}

),
{%- endfor %}

failures as (

    {%- for task in tasks %}
    select * from {{ task }}_failures
    {%- if not loop.last %}
    union all
    {%- endif %}
    {%- endfor %}

)

select
    key,
    task,
    model_id,
    row_id,
    entity_id,
    target_date,
    reason,
    attempts,
    failed_at,
    permanent,
    answered
from failures
qualify row_number() over (partition by task, key order by failed_at desc) = 1
