{#- on-run-end: record whether this build passed (table build_log, one row per build) and,
    when any node failed, drop every result table, so neither `lookahead report` nor an
    analyst's `select * from verdict` can take a failed build's leftovers as its result.
    The list of result tables is lookahead.identity.RESULT_TABLES. -#}
{% macro record_build(results) %}
  {% if execute and flags.WHICH in ('build', 'run') %}
    {% set failed = [] %}
    {% set messages = [] %}
    {% for r in results %}
      {% if r.status in ('error', 'fail', 'runtime error') %}
        {% do failed.append(r.node.name) %}
        {% do messages.append((r.message or '') | replace('\n', ' ') | truncate(300)) %}
      {% endif %}
    {% endfor %}
    {% set status = 'failed' if failed else 'success' %}
    {% do run_query("create table if not exists build_log (invocation_id varchar, study_name varchar, "
        ~ "status varchar, failed_nodes varchar, message varchar, finished_at timestamp)") %}
    {% do run_query("insert into build_log values ('" ~ invocation_id ~ "', " ~ sql_string(var('study_name'))
        ~ ", '" ~ status ~ "', " ~ sql_string(failed | join(', ')) ~ ", " ~ sql_string(messages | first | default('')) 
        ~ ", current_timestamp)") %}
    {% if failed %}
      {% set tables = run_query("select lookahead_result_tables()").columns[0].values()[0].split(',') %}
      {% for t in tables %}
        {% do run_query("drop table if exists " ~ target.schema ~ "." ~ t) %}
      {% endfor %}
    {% endif %}
    {% do run_query("checkpoint") %}
  {% endif %}
{% endmacro %}
