{#- Run-start checks: every study input exists and is usable, or the build stops with
    one line naming the setting, column or file. Nothing is written. -#}

{% macro check_study_inputs() %}
  {% if execute and flags.WHICH in ('build', 'run', 'test', 'compile', 'show') %}
    {{ check_study_settings() }}
    {{ check_data_file() }}
    {% for task in ['forecast', 'recall', 'mink'] %}
      {% set path = var('raw_dir') ~ '/' ~ task ~ '.jsonl' %}
      {% if run_query("select count(*) from glob('" ~ path ~ "')").columns[0].values()[0] == 0 %}
        {{ exceptions.raise_compiler_error(
            "setting 'raw_dir': raw file " ~ path ~ " not found; run the LLM jobs first "
            ~ "(python -m llm_jobs.run_all --study <file>), which create all three files") }}
      {% endif %}
    {% endfor %}
  {% endif %}
{% endmacro %}


{% macro check_study_settings() %}
  {% set choices = {
      'period_frequency': ['trading_day', 'day', 'week', 'month', 'fiscal_quarter'],
      'cluster': ['entity', 'period', 'date', 'none'],
      'high_lap_rule': ['pooled_median', 'entity_mean_median'],
      'lap_measure': ['recall', 'mink'],
      'mink_mean': ['geometric', 'arithmetic']} %}
  {% for name, allowed in choices.items() %}
    {% if var(name) not in allowed %}
      {{ exceptions.raise_compiler_error("setting '" ~ name ~ "': '" ~ var(name) ~ "' is not one of " ~ allowed | join(', ')) }}
    {% endif %}
  {% endfor %}
  {% set cutoff = run_query("select try_cast('" ~ var('training_cutoff') ~ "' as date) is null").columns[0].values()[0] %}
  {% if cutoff %}
    {{ exceptions.raise_compiler_error("setting 'training_cutoff': '" ~ var('training_cutoff') ~ "' is not a date (use YYYY-MM-DD)") }}
  {% endif %}
  {% set fy = var('fiscal_year_end_month') %}
  {% if fy is not number or fy < 1 or fy > 12 %}
    {{ exceptions.raise_compiler_error("setting 'fiscal_year_end_month': '" ~ fy ~ "' is not a month 1-12") }}
  {% endif %}
  {% for col in ['entity_id', 'entity_name', 'text', 'text_date', 'target_date', 'outcome'] %}
    {% if not var('column_map').get(col) %}
      {{ exceptions.raise_compiler_error("setting 'column_map." ~ col ~ "' is missing") }}
    {% endif %}
  {% endfor %}
{% endmacro %}


{% macro check_data_file() %}
  {% set path = var('data_path') %}
  {% set found = run_query("select count(*), coalesce(max(size), 0) from read_blob('" ~ path ~ "')") %}
  {% if found.columns[0].values()[0] == 0 %}
    {{ exceptions.raise_compiler_error("setting 'data_path': file '" ~ path ~ "' not found") }}
  {% endif %}
  {% if found.columns[1].values()[0] == 0 %}
    {{ exceptions.raise_compiler_error("setting 'data_path': file '" ~ path ~ "' is empty") }}
  {% endif %}
  {% set cols = run_query("describe select * from " ~ source('study', 'observations')).columns[0].values() %}
  {% for protocol_col, user_col in var('column_map').items() %}
    {% if user_col and user_col not in cols %}
      {{ exceptions.raise_compiler_error(
          "setting 'column_map." ~ protocol_col ~ "': column '" ~ user_col ~ "' not found in "
          ~ path ~ " (columns: " ~ cols | join(', ') ~ ")") }}
    {% endif %}
  {% endfor %}
  {% set id_col = var('column_map').get('row_id') %}
  {% if id_col %}
    {% set dupes = run_query(
        "with numbered as (select row_number() over () as n, cast(\"" ~ id_col ~ "\" as varchar) as id from "
        ~ source('study', 'observations') ~ ") select id, array_to_string(list(n order by n)[1:3], ', ') as rows, count(*) as c "
        ~ "from numbered where id is not null group by id having count(*) > 1 order by min(n) limit 3") %}
    {% if dupes.rows | length > 0 %}
      {% set first = dupes.rows[0] %}
      {{ exceptions.raise_compiler_error(
          "setting 'column_map.row_id': column '" ~ id_col ~ "' is not unique: value '" ~ first[0]
          ~ "' appears " ~ first[2] ~ " times (data rows " ~ first[1] ~ ")"
          ~ (" and " ~ (dupes.rows | length - 1) ~ " more duplicated value(s)" if dupes.rows | length > 1 else "")) }}
    {% endif %}
  {% endif %}
  {% for extra in var('extra_columns', []) %}
    {% if extra not in cols %}
      {{ exceptions.raise_compiler_error("setting 'extra_columns': column '" ~ extra ~ "' not found in " ~ path) }}
    {% endif %}
  {% endfor %}
{% endmacro %}
