-- What this build is of, one row: dbt's invocation id, the study, its settings hash and
-- the fingerprints (sha256) of the input file and of each task's cache (all its shards).
-- Copied into the verdict row; `lookahead report` compares it with the study's files as they are now.
-- raw_reads records what the build read under raw_dir (lookahead.raw_reads): a later line
-- for a key the study asks for, or a rewritten file, makes the result stale; another
-- study's lines appended to the shared files do not.
-- inputs_fingerprint (every file the build reads) and code_fingerprint (models, macros,
-- seeds, tests, suites, package, library versions) let `lookahead run` skip a build that
-- would reproduce this one (lookahead.identity.build_up_to_date).
with settings as (

    select * from {{ ref('study_settings') }}

)

select
    {{ sql_string(invocation_id) }} as invocation_id,
    study_name,
    settings_hash,
    lookahead_fingerprint({{ sql_string(setting_path('data_path')) }}) as data_fingerprint,
    {%- for task in ['forecast', 'recall', 'mink'] %}
    lookahead_cache_fingerprint({{ sql_string(setting_path('raw_dir')) }}, {{ sql_string(task) }}) as {{ task }}_fingerprint,
    {%- endfor %}
    lookahead_inputs_fingerprint(settings_json) as inputs_fingerprint,
    lookahead_raw_reads({{ sql_string(setting_path('raw_dir')) }}) as raw_reads,
    lookahead_code_fingerprint() as code_fingerprint,
    current_timestamp as built_at
from settings
