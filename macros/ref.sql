{#- ref() without the database: compiled SQL names `main.<model>`, never `study.main.<model>`.
    Why: every study's nodes live in the catalog `study` inside dbt (profiles/profiles.yml,
    constant so that a new study does not re-parse the project), while a study's database
    opened directly (`duckdb outputs/<study_name>.duckdb`) has the catalog <study_name>; the
    SQL `dbt compile` writes (analyses/) runs in both. dbt's documented way to leave the
    database out of a relation. -#}
{% macro ref() -%}
  {%- set relation = builtins.ref(*varargs, **kwargs) -%}
  {{ return(relation.include(database=False)) }}
{%- endmacro %}
