{#- A setting of the study this build is for, read when the node runs (execute), from
    the project's DuckDB plugin (lookahead_setting: lookahead.config.dbt_study, the study
    of --vars, of $LOOKAHEAD_STUDY_SETTINGS or the default one). Not var(): the lookahead
    command does not pass its study as --vars, whose every change makes dbt re-parse the
    whole project (docs/CONTRACTS.md, "How a study reaches dbt"). A unit test's
    `overrides: vars:` win, through var() (which holds them). While dbt parses, the value
    is dbt_project.yml's (the default study): it shapes no dependency. -#}
{% macro setting(name) -%}
  {%- set node = model if model is defined and model is mapping else {} -%}
  {%- set overridden = ((node.get('overrides') or {}).get('vars') or {}) -%}
  {%- if execute and name not in overridden -%}
    {{ return(fromjson(run_query("select lookahead_setting(" ~ sql_string(name) ~ ")").columns[0].values()[0])) }}
  {%- else -%}
    {{ return(var(name, none)) }}
  {%- endif -%}
{%- endmacro %}
