{#- Generic tests that would otherwise come from dbt_utils / dbt-expectations (no package
    hub is reachable here), written as project macros. -#}

{% test unique_combination_of_columns(model, combination_of_columns) %}
with grouped as (

    select {{ combination_of_columns | join(', ') }}, count(*) as n_rows
    from {{ model }}
    group by {{ combination_of_columns | join(', ') }}

)

select * from grouped where n_rows > 1
{% endtest %}


{% test accepted_range(model, column_name, min_value=none, max_value=none) %}
select {{ column_name }}
from {{ model }}
where {{ column_name }} is not null
  and (
    false
    {%- if min_value is not none %} or {{ column_name }} < {{ min_value }}{% endif %}
    {%- if max_value is not none %} or {{ column_name }} > {{ max_value }}{% endif %}
  )
{% endtest %}


{% test equal_rowcount(model, compare_model) %}
with model_count as (

    select count(*) as n_model from {{ model }}

),

compare_count as (

    select count(*) as n_compare from {{ compare_model }}

)

select * from model_count cross join compare_count where n_model != n_compare
{% endtest %}


{% test expression_is_true(model, expression, column_name=none) %}
select * from {{ model }} where not ({{ expression }})
{% endtest %}


{#- dbt's relationships test, with each parent value once: its left join against a parent
    that repeats the value (panel.entity_id against the valid rows) made one row per
    repeat, 630 million rows and 7 s at 1M input rows. Same result. -#}
{% macro default__test_relationships(model, column_name, to, field) %}
with child as (

    select {{ column_name }} as from_field
    from {{ model }}
    where {{ column_name }} is not null

),

parent as (

    select distinct {{ field }} as to_field
    from {{ to }}

)

select from_field
from child
left join parent
    on child.from_field = parent.to_field
where parent.to_field is null
{% endmacro %}


{#- not_null on several columns of one model, as one test: each listed column must hold no
    null; a failure returns one row per column that holds one, with how many rows
    (null_rows). Why not dbt's not_null on each column: each data test is a dbt node, and
    a node costs dbt about 0.02-0.03 CPU-seconds of its own (compiling, a cursor, the
    run-result events and log lines) against about a millisecond for the query; with 129
    columns checked that way across the protocol's models, the checks took more of the
    91,361-row build than the staging of a cache (BENCHMARKS.md, issue 47); the claim
    path's models and the seeds held 110 more, a fixture build's largest group of nodes.
    One scan of the model counts the nulls of every column. -#}
{% test not_null_columns(model, column_names) %}
with counts as (

    select
    {%- for c in column_names %}
        count(*) filter (where {{ sql_identifier(c) }} is null) as {{ sql_identifier(c) }}{{ ',' if not loop.last }}
    {%- endfor %}
    from {{ model }}

)

select column_name, null_rows
from (unpivot counts on columns(*) into name column_name value null_rows) as per_column
where null_rows > 0
{% endtest %}
