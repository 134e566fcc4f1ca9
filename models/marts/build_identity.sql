-- What this build is of, one row: dbt's invocation id, the study, its settings hash and
-- the fingerprints (sha256) of the input file and of each task's cache (all its shards).
-- Copied into the verdict row; `lookahead report` compares it with the study's files as they are now.
with settings as (

    select * from {{ ref('study_settings') }}

)

select
    '{{ invocation_id }}' as invocation_id,
    study_name,
    settings_hash,
    lookahead_fingerprint({{ sql_string(var('data_path')) }}) as data_fingerprint,
    {%- for task in ['forecast', 'recall', 'mink'] %}
    lookahead_cache_fingerprint({{ sql_string(var('raw_dir')) }}, {{ sql_string(task) }}) as {{ task }}_fingerprint,
    {%- endfor %}
    current_timestamp as built_at
from settings
