{#- The prompt-scoring measures' shared pieces (lookahead/measures.py). The Min-K% lines
    are parsed once, in stg_mink_scores, which scores each line's tokens there with the
    macros below (a measure's model selects its score); a measure reading another prompt
    task (`reference`: the same prompts scored by the reference model) reads that task's
    raw lines with `prompt_token_lines(task)`: one line per key (the first written), its
    typed prompt tokens after the first (the first has no conditional probability) and
    zlib_bytes; no lines while the raw file is absent (a study that does not compute the
    measure). -#}
{% macro prompt_token_lines(task) -%}
    {%- set relation = source('raw', task) %}
    {%- set present = true %}
    {%- if execute %}
      {%- set present = raw_file_count(task ~ '.jsonl') > 0 %}
    {%- endif %}
    {%- if not present %}
    select
        null::varchar as key, null::varchar as task, null::varchar as model_id, null::varchar as row_id,
        null::bigint as zlib_bytes,
        null::struct(logprob double, vocab_mean double, vocab_var double)[] as after_first,
        null::boolean as fields_match
    where false
    {%- else %}
    select
        key,
        task,
        model_id,
        row_id,
        zlib_bytes,
        list_slice(prompt_logprobs, 2, len(prompt_logprobs)) as after_first,
        fields_match
    from (
        select *, {{ fields_match(task) }} as fields_match from {{ relation }} where key is not null
    ) as raw_lines
    {{ first_written_line('raw_lines') }}
    {%- endif %}
{%- endmacro %}


{#- The mean log-prob of a token list (a line's prompt tokens after the first), null when
    a log-prob is missing or invalid: the loss LAP, and the reference model's side of the
    reference LAP. -#}
{% macro mean_token_logprob(tokens) -%}
    case when not {{ has_bad_logprob(tokens) }} then
        list_avg(list_transform({{ tokens }}, lambda t: t.logprob))
    end
{%- endmacro %}


{#- Min-K%++ (Zhang et al. 2024) of a token list: the mean of the lowest
    max(1, floor(K n)) per-token z-scores (log-prob minus the vocabulary's mean log-prob at
    that position, over the square root of its variance), K = setting mink_k; null when a
    log-prob is missing or invalid, or a position lacks the vocabulary moments (a line
    whose study did not ask for them). -#}
{% macro minkpp_score(tokens) -%}
    list_avg(list_slice(
        case when not {{ has_bad_logprob(tokens) }}
            and not coalesce(list_bool_or(list_transform({{ tokens }},
                lambda t: t.vocab_mean is null or t.vocab_var is null or not t.vocab_var > 0)), true)
            then list_sort(list_transform({{ tokens }}, lambda t: (t.logprob - t.vocab_mean) / sqrt(t.vocab_var)))
        end,
        1, greatest(1, floor(len({{ tokens }}) * {{ setting('mink_k') }}))))
{%- endmacro %}


{#- True when a token list (a line's prompt tokens after the first) has a missing or
    invalid log-prob: such a line gets no score (gate_mink_scores counts them). -#}
{% macro has_bad_logprob(tokens) -%}
    coalesce(list_bool_or(list_transform({{ tokens }}, lambda t: t.logprob is null
        or {{ is_invalid_logprob('t.logprob') }})), true)
{%- endmacro %}


{#- The last part of a prompt measure's model: the lines (one per key, the first written)
    whose key the study asks for (int_expected_keys, task `task`) and whose fields agree
    with it (`model_id`: the target's, or the reference's for task reference); row_id and
    the score `column` of CTE `relation`. -#}
{% macro prompt_measure_rows(relation, column, task='mink', model_id=none) -%}
expected as (

    select * from {{ ref('int_expected_keys') }}
    where task = {{ sql_string(task) }}

)

select
    {{ relation }}.row_id,
    {{ relation }}.{{ column }}
from {{ relation }}
inner join expected
    on {{ relation }}.key = expected.key
where {{ relation }}.task = {{ sql_string(task) }}
    and {{ relation }}.fields_match
    and {{ relation }}.row_id = expected.row_id
    and {{ relation }}.model_id = {{ sql_string(setting('model_id') if model_id is none else model_id) }}
{%- endmacro %}
