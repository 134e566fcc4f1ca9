{#- The claim jobs' raw lines (source claims_raw; seed 002, docs/claims.md), read the way
    the protocol's raw lines are read (macros/study_helpers.sql): typed, each line's key
    checked against its own fields, the lines that fail listed in raw_line_rejects. -#}

{#- How many files named `file_name` lie in the claim jobs' raw folder (not below it:
    the claim jobs write one file per job, lookahead.claims.inputs.claims_raw_file). The
    folder is the plugin's variable lookahead_study.claims_raw_dir, never pasted into SQL. -#}
{% macro claim_file_count(file_name) -%}
  {{ return(run_query("select count(*) from glob(getvariable('lookahead_study').claims_raw_dir || '/' || "
                      ~ sql_string(file_name) ~ ")").columns[0].values()[0]) }}
{%- endmacro %}


{#- The canonical JSON of a line's params (`params`, a JSON column) as the key hashes it
    (lookahead.keys.params_json: sorted keys, no spaces; less UNKEYED_PARAMS). The claim
    jobs' params are flat (numbers, booleans, null, ASCII text: the job's phase, agent or
    draft), which this rebuilds exactly; a nested or non-ASCII value would read as not
    matching (DuckDB writes neither as Python's json.dumps does). -#}
{% macro claim_params_json(params) -%}
    ('{' || array_to_string(list_transform(
        list_sort(list_filter(json_keys({{ params }}), k -> k <> 'text_truncated_to_chars')),
        k -> to_json(k)::varchar || ':' || coalesce(json_extract({{ params }}, k)::varchar, 'null')), ',') || '}')
{%- endmacro %}


{#- Every raw line of the claim job `task` (its source table), with its position in the
    file (line_number, from 1: the order it was written, which the staging models' rules
    of which line wins read) and whether its own fields hash to its key (fields_match:
    task, model_id, row_id, query_text and params, lookahead.keys.fields_key); no lines
    while the job's file is absent (a job the study does not run). Lines of other models
    stay here: the staging models keep the study's claim model's. -#}
{% macro claim_lines(task) -%}
    {%- set relation = source('claims_raw', task) %}
    {%- set present = true %}
    {%- set node = model if model is defined and model is mapping else {} %}
    {#- a unit test gives the source's rows itself: no file is looked for #}
    {%- if execute and node.get('resource_type') != 'unit_test' and not node.get('overrides') %}
      {%- set present = claim_file_count(task ~ '.jsonl') > 0 %}
    {%- endif %}
    {%- if not present %}
    select
        null::varchar as key, null::varchar as task, null::varchar as model_id, null::varchar as row_id,
        null::varchar as query_text, null::json as params, null::varchar as response_text, null::json as top_logprobs,
        null::varchar as instance_id, null::varchar as agent, null::varchar as rationale_sha256,
        null::varchar as claims_sha256, null::varchar as claim_sha256, null::varchar as doc_id,
        null::bigint as mask, null::bigint as attempt, null::bigint as attempts, null::boolean as valid,
        null::varchar as error, null::json as claims, null::boolean as final, null::boolean as supports,
        null::varchar as task_kind, null::json as label_probs, null::double as value, null::json as ranking,
        null::varchar as entity, null::varchar as task_name, null::varchar as t_ref, null::varchar as task_input,
        null::varchar as prediction, null::varchar as rationale, null::varchar as outcome, null::double as probability,
        null::varchar as finished_at, null::varchar as filename, null::bigint as line_number,
        null::boolean as fields_match
    where false
    {%- else %}
    select
        *,
        coalesce(key = sha256(task || '|' || model_id || '|' || row_id || '|' || query_text || '|'
            || {{ claim_params_json('params') }}), false) as fields_match
    from (
        select *, row_number() over () as line_number
        from {{ relation }}
    ) as numbered
    /* a torn line reads as all-null; the job repairs it on rerun */
    where key is not null
    {%- endif %}
{%- endmacro %}


{#- The model whose claim lines the claim models read, as SQL text: claims_model_id, else
    model_id (lookahead.claims.inputs.claim_study, the swap the claim jobs make). -#}
{% macro claim_model_id() -%}
  {{ sql_string(setting('claims_model_id') or setting('model_id')) }}
{%- endmacro %}


{#- Whether the study has claim settings (lookahead.claims.inputs.has_claims), asked of the
    project's plugin when a node runs. At parse time it says yes, so that every ref under
    it is in the graph. -#}
{% macro study_has_claims() %}
  {% if not execute %}{{ return(true) }}{% endif %}
  {{ return(run_query("select lookahead_has_claims()").columns[0].values()[0]) }}
{% endmacro %}
