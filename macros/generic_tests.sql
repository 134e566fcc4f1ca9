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


{#- The column rules of one model as one test: dbt's not_null, unique and accepted_values
    and dbt_utils' accepted_range (inclusive bounds, numbers), each listed column with its
    rule, checked in one scan of the model. A failure returns one row per rule and column
    that does not hold (rule, column_name, failing_rows): rows with a null (not_null), rows beyond the first
    with a repeated value (unique), rows whose value is outside the list (accepted_values)
    or the range (accepted_range). Nulls pass every rule but not_null, as in dbt's own
    tests; accepted values are compared as quoted literals, as dbt's accepted_values does
    by default. Why not dbt's tests on each column: each data test is a dbt node, and a
    node costs dbt about 0.02-0.03 CPU-seconds of its own (compiling, a cursor, the
    run-result events and log lines) against about a millisecond for the query; the
    project's 358 column rules were 168 test nodes, the largest group of nodes in every
    build, and are 61 (BENCHMARKS.md, issue 47). A rule with a `where` stays dbt's own test
    on its column. Each use names itself `column_rules_<model>` in the YAML (`name:`), so
    what dbt prints is the model, not the arguments flattened into a name. -#}
{% test column_rules(model, not_null=[], unique=[], accepted_values={}, accepted_range={}) %}
{%- set checks = [] -%}
{%- for c in not_null -%}
  {%- do checks.append(('not_null', c, 'count(*) filter (where ' ~ sql_identifier(c) ~ ' is null)')) -%}
{%- endfor -%}
{%- for c in unique -%}
  {%- do checks.append(('unique', c, 'count(' ~ sql_identifier(c) ~ ') - count(distinct ' ~ sql_identifier(c) ~ ')')) -%}
{%- endfor -%}
{%- for c, values in accepted_values.items() -%}
  {%- set literals = [] -%}
  {%- for v in values -%}{%- do literals.append(sql_string(v)) -%}{%- endfor -%}
  {%- do checks.append(('accepted_values', c, 'count(*) filter (where ' ~ sql_identifier(c) ~ ' not in (' ~ literals | join(', ') ~ '))')) -%}
{%- endfor -%}
{%- for c, bounds in accepted_range.items() -%}
  {%- set outside = [] -%}
  {%- for key, op in [('min_value', ' < '), ('max_value', ' > ')] if bounds.get(key) is not none -%}
    {%- if bounds[key] is not number -%}
      {{ exceptions.raise_compiler_error("column_rules: the accepted_range of " ~ c ~ " has a " ~ key ~ " that is not a number") }}
    {%- endif -%}
    {%- do outside.append(sql_identifier(c) ~ op ~ bounds[key]) -%}
  {%- endfor -%}
  {%- if not outside -%}
    {{ exceptions.raise_compiler_error("column_rules: the accepted_range of " ~ c ~ " has neither min_value nor max_value") }}
  {%- endif -%}
  {%- do checks.append(('accepted_range', c, 'count(*) filter (where ' ~ outside | join(' or ') ~ ')')) -%}
{%- endfor -%}
{%- if not checks -%}
  {{ exceptions.raise_compiler_error("column_rules lists no column") }}
{%- endif -%}
with counts as (

    select
    {%- for rule, c, expression in checks %}
        {{ expression }} as {{ sql_identifier(rule ~ ' ' ~ c) }}{{ ',' if not loop.last }}
    {%- endfor %}
    from {{ model }}

),

per_rule as (

    unpivot counts on columns(*) into name rule_column value failing_rows

)

select
    split_part(rule_column, ' ', 1) as rule,
    substr(rule_column, strpos(rule_column, ' ') + 1) as column_name,
    failing_rows
from per_rule
where failing_rows > 0
{% endtest %}
