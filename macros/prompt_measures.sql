{#- The prompt-scoring measures' shared pieces (lookahead/measures.py): the `mink` task's
    lines as staged (stg_mink_scores parses the raw file once, one line per key) with
    their typed prompt tokens after the first (the first has no conditional probability)
    and zlib_bytes, and the rows of the current study, so a measure's model is its score. -#}
{% macro prompt_token_lines() -%}
    select
        key,
        task,
        model_id,
        row_id,
        zlib_bytes,
        after_first
    from {{ ref('stg_mink_scores') }}
{%- endmacro %}


{#- True when a token list (the `after_first` of prompt_token_lines) has a missing or
    invalid log-prob: such a line gets no score (gate_mink_scores counts them). -#}
{% macro has_bad_logprob(tokens) -%}
    coalesce(list_bool_or(list_transform({{ tokens }}, lambda t: t.logprob is null
        or {{ is_invalid_logprob('t.logprob') }})), true)
{%- endmacro %}


{#- The last part of a prompt measure's model: the lines (one per key, the first written,
    as staged) whose key the study asks for (int_expected_keys, task mink) and whose fields
    agree with it; row_id and the score `column` of CTE `relation`. -#}
{% macro prompt_measure_rows(relation, column) -%}
expected as (

    select * from {{ ref('int_expected_keys') }}
    where task = 'mink'

)

select
    {{ relation }}.row_id,
    {{ relation }}.{{ column }}
from {{ relation }}
inner join expected
    on {{ relation }}.key = expected.key
where {{ relation }}.task = 'mink'
    and {{ relation }}.row_id = expected.row_id
    and {{ relation }}.model_id = {{ sql_string(var('model_id')) }}
{%- endmacro %}
