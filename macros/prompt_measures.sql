{#- The prompt-scoring measures' shared pieces (lookahead/measures.py): the `mink` task's
    raw lines with their prompt tokens after the first (the first has no conditional
    probability), and the rows of the current study, so a measure's model is its score. -#}
{% macro prompt_token_lines() -%}
    select
        key,
        task,
        model_id,
        row_id,
        entity_id,
        target_date,
        zlib_bytes,
        list_slice(prompt_logprobs, 2, len(prompt_logprobs)) as after_first,
        filename,
        finished_at
    from {{ source('raw', 'mink') }}
    where key is not null
{%- endmacro %}


{#- True when a token list (the `after_first` of prompt_token_lines) has a missing or
    invalid log-prob: such a line gets no score (gate_mink_scores counts them). -#}
{% macro has_bad_logprob(tokens) -%}
    coalesce(list_bool_or(list_transform({{ tokens }}, lambda t: t.logprob is null
        or {{ is_invalid_logprob('t.logprob') }})), true)
{%- endmacro %}


{#- The last part of a prompt measure's model: one line per key (the first written), the
    lines whose key the study asks for (int_expected_keys, task mink) and whose fields
    agree with it; row_id and the score `column` of CTE `relation`. -#}
{% macro prompt_measure_rows(relation, column) -%}
deduped as (

    select * from {{ relation }}
    {{ first_written_line(relation) }}

),

expected as (

    select * from {{ ref('int_expected_keys') }}
    where task = 'mink'

)

select
    deduped.row_id,
    deduped.{{ column }}
from deduped
inner join expected
    on deduped.key = expected.key
where deduped.task = 'mink'
    and deduped.row_id = expected.row_id
    and deduped.model_id = {{ sql_string(setting('model_id')) }}
{%- endmacro %}
