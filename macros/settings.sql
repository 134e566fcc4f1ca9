{#- A setting of the study this build is for, read when the node runs (execute), from
    the project's DuckDB plugin (lookahead_setting: lookahead.config.dbt_study, the study
    of --vars, of $LOOKAHEAD_STUDY_SETTINGS or the default one). Not var(): the lookahead
    command does not pass its study as --vars, whose every change makes dbt re-parse the
    whole project (docs/CONTRACTS.md, "How a study reaches dbt"). A unit test's
    `overrides: vars:` win, through var() (which holds them). While dbt parses, the value
    is the --vars value as given, else dbt_project.yml's (the default study): it shapes no
    dependency. -#}
{% macro setting(name) -%}
  {{ return(study_setting(name, 'lookahead_setting')) }}
{%- endmacro %}


{#- The one reading of a setting behind setting() and setting_path(): at run time from the
    plugin function `reader` (lookahead_setting or lookahead_setting_path), else the --vars
    value as given, else var() (dbt_project.yml's value, or a unit test's override). -#}
{% macro study_setting(name, reader) -%}
  {%- set node = model if model is defined and model is mapping else {} -%}
  {%- set overridden = ((node.get('overrides') or {}).get('vars') or {}) -%}
  {%- set given = cli_vars() -%}
  {%- if execute and name not in overridden -%}
    {{ return(fromjson(run_query("select " ~ reader ~ "(" ~ sql_string(name) ~ ")").columns[0].values()[0])) }}
  {%- elif name in given and name not in overridden -%}
    {{ return(given[name]) }}
  {%- else -%}
    {{ return(var(name, none)) }}
  {%- endif -%}
{%- endmacro %}


{#- This invocation's `--vars` as given (a mapping; {} without them). Read instead of
    var() for a setting the command line gives: dbt's var() renders a string var as a
    Jinja template, so a study's `{{ ... }}` would run at parse time (docs/SECURITY.md).
    var() is left for dbt_project.yml's generated values (the default study, whose
    values python scripts/generated_files.py --write-dbt-vars refuses to write with Jinja in
    them) and a unit test's overrides (the project's own files). -#}
{% macro cli_vars() -%}
  {%- set given = invocation_args_dict.get('vars') or {} -%}
  {%- if given is string -%}
    {%- set given = fromyaml(given) or {} -%}
  {%- endif -%}
  {{ return(given if given is mapping else {}) }}
{%- endmacro %}


{#- A path setting of the build's study (data_path, raw_dir, ...) resolved against the
    project folder when relative, as the lookahead package resolves it
    (lookahead.config.Study.resolve): DuckDB reads a relative path from the working folder,
    and `dbt build --project-dir <project>` may run from anywhere. Null when not set. -#}
{% macro setting_path(name) -%}
  {{ return(study_setting(name, 'lookahead_setting_path')) }}
{%- endmacro %}
