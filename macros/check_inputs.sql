{#- Run-start checks: every study input exists and is usable, or the build stops with
    one line naming the setting, column or file. Nothing is written. -#}

{% macro check_study_inputs() %}
  {% if execute and flags.WHICH in ('build', 'run', 'test', 'compile', 'show') %}
    {{ check_study_settings() }}
    {{ check_study_collision() }}
    {#- a claim-only study (study_kind: claims) has no observations file and no protocol
        jobs: its claim models read the claim settings' own files, checked by the claim jobs -#}
    {% if setting('study_kind') != 'claims' %}
    {{ check_data_file() }}
    {#- paths reach SQL as the plugin's variables (getvariable), never as text -#}
    {% set raw_dir = setting_path('raw_dir') %}
    {% for task in ['forecast', 'recall', 'mink'] %}
      {% if raw_file_count(task ~ '.jsonl') == 0 %}
        {{ exceptions.raise_compiler_error(
            "setting 'raw_dir': no raw file " ~ raw_dir ~ "/**/" ~ task ~ ".jsonl found; run the LLM jobs first "
            ~ "(lookahead jobs --study <file>), which create all three files") }}
      {% endif %}
    {% endfor %}
    {#- the reference model's file only for a study computing the reference-model LAP -#}
    {% if 'reference' == setting('lap_measure') or 'reference' in (setting('lap_measures') or []) %}
      {% if raw_file_count('reference.jsonl') == 0 %}
        {{ exceptions.raise_compiler_error(
            "setting 'lap_measures': the study computes 'reference' but no raw file " ~ raw_dir ~ "/**/reference.jsonl"
            ~ " was found; run the LLM jobs first (lookahead jobs --study <file>, "
            ~ "or that job alone: lookahead jobs --study <file> --only reference)") }}
      {% endif %}
    {% endif %}
    {% endif %}
  {% endif %}
{% endmacro %}


{#- The settings are checked by the package (lookahead/config.py, through the DuckDB
    functions of lookahead/dbt_plugin.py) against their one declaration,
    lookahead/study_settings.yml: the same code the LLM jobs run, so the two never differ. -#}
{% macro check_study_settings() %}
  {% set names = run_query("select lookahead_setting_names()").columns[0].values()[0].split(',') %}
  {% set values = {} %}
  {% set given = cli_vars() %}
  {#- a setting given on the command line is read as given: var() would render its text
      as a Jinja template (dbt renders string vars), so `{{ ... }}` in a study would run -#}
  {% for name in names %}
    {% do values.update({name: json_safe(given[name] if name in given else var(name, none))}) %}
  {% endfor %}
  {% set cli = json_safe(given) %}
  {% set message = run_query(
      "select lookahead_check_settings(" ~ sql_string(tojson(values)) ~ ", " ~ sql_string(tojson(cli)) ~ ")"
  ).columns[0].values()[0] %}
  {% if message %}
    {{ exceptions.raise_compiler_error(message) }}
  {% endif %}
{% endmacro %}


{#- One database, one study (lookahead/collision.py): a build (not a test or compile) stops
    when the database's last build was another study, from another source with other
    settings (or, through --vars, with other identifying settings), unless --full-refresh
    asks to replace its results. It runs in the first run-start hook: a refused build never
    reaches record_build_start, which retires the report and marks the verdict. -#}
{% macro check_study_collision() %}
  {% if flags.WHICH in ('build', 'run') and not flags.FULL_REFRESH %}
    {% set logged = run_query("select count(*) from information_schema.columns where table_name = 'build_log' "
        ~ "and column_name = 'study_source' and table_schema = '" ~ target.schema ~ "'").columns[0].values()[0] %}
    {% if logged > 0 %}
      {#- a database from before identity_hash was recorded reads as '' (lookahead.collision) -#}
      {% set identified = run_query("select count(*) from information_schema.columns where table_name = 'build_log' "
          ~ "and column_name = 'identity_hash' and table_schema = '" ~ target.schema ~ "'").columns[0].values()[0] %}
      {% set last = run_query("select coalesce(study_name, ''), coalesce(study_source, ''), settings_hash, "
          ~ ("coalesce(identity_hash, '')" if identified > 0 else "''")
          ~ " from build_log where settings_hash is not null order by finished_at desc limit 1") %}
      {% if last.rows | length > 0 %}
        {% set message = run_query("select lookahead_study_collision(" ~ sql_string(last.rows[0][0]) ~ ", "
            ~ sql_string(last.rows[0][1]) ~ ", " ~ sql_string(last.rows[0][2]) ~ ", "
            ~ sql_string(last.rows[0][3]) ~ ")").columns[0].values()[0] %}
        {% if message %}
          {{ exceptions.raise_compiler_error(message) }}
        {% endif %}
      {% endif %}
    {% endif %}
  {% endif %}
{% endmacro %}


{#- A var as JSON-ready values: YAML dates (an unquoted 2023-12-31) become text. -#}
{% macro json_safe(value) %}
  {% if value is none or value is string or value is number or value is boolean %}
    {{ return(value) }}
  {% elif value is mapping %}
    {% set out = {} %}
    {% for k, v in value.items() %}{% do out.update({k | string: json_safe(v)}) %}{% endfor %}
    {{ return(out) }}
  {% elif value is iterable %}
    {% set out = [] %}
    {% for v in value %}{% do out.append(json_safe(v)) %}{% endfor %}
    {{ return(out) }}
  {% else %}
    {{ return(value | string) }}
  {% endif %}
{% endmacro %}


{% macro check_data_file() %}
  {% set path = setting_path('data_path') %}
  {#- the path is read from the plugin's variable (getvariable), never pasted into the SQL -#}
  {% set found = run_query("select count(*), coalesce(max(size), 0) from read_blob(getvariable('lookahead_study').data_path)") %}
  {% if found.columns[0].values()[0] == 0 %}
    {{ exceptions.raise_compiler_error("setting 'data_path': file '" ~ path ~ "' not found") }}
  {% endif %}
  {% if found.columns[1].values()[0] == 0 %}
    {{ exceptions.raise_compiler_error("setting 'data_path': file '" ~ path ~ "' is empty") }}
  {% endif %}
  {% set cols = run_query("describe select * from " ~ source('study', 'observations')).columns[0].values() %}
  {% for protocol_col, user_col in setting('column_map').items() %}
    {% if user_col and user_col not in cols %}
      {{ exceptions.raise_compiler_error(
          "setting 'column_map." ~ protocol_col ~ "': column '" ~ user_col ~ "' not found in "
          ~ path ~ " (columns: " ~ cols | join(', ') ~ ")") }}
    {% endif %}
  {% endfor %}
  {% set id_col = setting('column_map').get('row_id') %}
  {% if id_col %}
    {#- count and min per id (aggregates that spill to disk), then the rows of at most three
        duplicated ids: a list of every id's rows could not spill and ran out of DuckDB's
        buffer pool at 10,000,000 rows -#}
    {% set dupes = run_query(
        "with numbered as (select row_number() over () as n, cast(" ~ sql_identifier(id_col) ~ " as varchar) as id from "
        ~ source('study', 'observations') ~ "), "
        ~ "dupes as (select id, count(*) as c, min(n) as first_n from numbered where id is not null "
        ~ "group by id having count(*) > 1 order by first_n limit 3) "
        ~ "select dupes.id, array_to_string(list(numbered.n order by numbered.n)[1:3], ', ') as rows, dupes.c "
        ~ "from dupes join numbered on numbered.id = dupes.id "
        ~ "group by dupes.id, dupes.c, dupes.first_n order by dupes.first_n") %}
    {% if dupes.rows | length > 0 %}
      {% set first = dupes.rows[0] %}
      {{ exceptions.raise_compiler_error(
          "setting 'column_map.row_id': column '" ~ id_col ~ "' is not unique: value '" ~ first[0]
          ~ "' appears " ~ first[2] ~ " times (data rows " ~ first[1] ~ ")"
          ~ (" and " ~ (dupes.rows | length - 1) ~ " more duplicated value(s)" if dupes.rows | length > 1 else "")) }}
    {% endif %}
  {% endif %}
  {% for extra in setting('extra_columns') %}
    {% if extra not in cols %}
      {{ exceptions.raise_compiler_error("setting 'extra_columns': column '" ~ extra ~ "' not found in " ~ path) }}
    {% endif %}
  {% endfor %}
{% endmacro %}
