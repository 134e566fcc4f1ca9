{#- on-run-end: record whether this build passed (table build_log, one row per build) and,
    when any node failed, drop every result table, so neither `lookahead report` nor an
    analyst's `select * from verdict` can take a failed build's leftovers as its result.
    The list of result tables is lookahead.identity.RESULT_TABLES. -#}
{#- on-run-start: a 'started' row in build_log, so a build killed before its end (no
    on-run-end) reads as unfinished (lookahead.identity.check_current), and the verdict of
    an earlier build is marked stale in its row (result_status) for SQL users. -#}
{% macro record_build_start() %}
  {% if execute and flags.WHICH in ('build', 'run') %}
    {#- the gates' Great Expectations, in a process of its own started beside the first SQL
        nodes, when the build runs a gate; it ends after the last of them (lookahead.gates.worker) -#}
    {%- set gates = [] -%}
    {%- for node_id in selected_resources if node_id.startswith('model.') and node_id.split('.')[-1].startswith('gate_') -%}
      {%- do gates.append(node_id.split('.')[-1]) -%}
    {%- endfor -%}
    {% if gates %}{% do run_query("select lookahead_start_gate_worker(" ~ sql_string(gates | join(',')) ~ ")") %}{% endif %}
    {{ create_build_log() }}
    {#- where the study came from, its settings hash and its identifying settings' hash: the
        next build's collision check (lookahead/collision.py) -#}
    {% do run_query("insert into build_log (invocation_id, study_name, status, failed_nodes, message, "
        ~ "finished_at, command, selection, study_source, settings_hash, identity_hash) values ('" ~ invocation_id
        ~ "', lookahead_study_name(), 'started', '', '', current_timestamp, '" ~ flags.WHICH ~ "', '', "
        ~ "lookahead_study_source(), lookahead_settings_hash(lookahead_study_json()), lookahead_identity_hash())") %}
    {#- a selection without the verdict leaves its mark alone (partial builds keep status true) -#}
    {% if verdict_exists() and verdict_node_id() in selected_resources %}
      {% do run_query("alter table " ~ target.schema ~ ".verdict_py add column if not exists result_status varchar") %}
      {% do run_query("update " ~ target.schema ~ ".verdict_py set result_status = lookahead_verdict_mark("
          ~ sql_string('a later dbt build (invocation ' ~ invocation_id ~ ') started') ~ ")") %}
    {% endif %}
    {#- a study without claim settings has no claim tables: those of an earlier build with
        claims go, whether this build leaves the claim path out (`lookahead run`,
        lookahead.claims.inputs.protocol_build_selection) or builds it empty (`dbt build`) -#}
    {% if not study_has_claims() %}
      {#- through the adapter, so that dbt's cache of relations, read before this hook,
          knows them gone and a plain build creates them anew -#}
      {% for node in graph.nodes.values() if node.resource_type == 'model' and 'claims' in node.tags %}
        {% set relation = adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias) %}
        {% if relation is not none %}{% do adapter.drop_relation(relation) %}{% endif %}
      {% endfor %}
    {% endif %}
    {% do run_query("checkpoint") %}
    {#- the report files of an earlier build move to stale/ (lookahead.artefacts), as with
        `lookahead build`: a plain dbt build leaves no report that reads as its result -#}
    {% do run_query("select lookahead_retire_report(" ~ sql_string(invocation_id) ~ ")") %}
  {% endif %}
{% endmacro %}

{% macro create_build_log() %}
    {% do run_query("create table if not exists build_log (invocation_id varchar, study_name varchar, "
        ~ "status varchar, failed_nodes varchar, message varchar, finished_at timestamp)") %}
    {% do run_query("alter table build_log add column if not exists command varchar") %}
    {% do run_query("alter table build_log add column if not exists selection varchar") %}
    {% do run_query("alter table build_log add column if not exists study_source varchar") %}
    {% do run_query("alter table build_log add column if not exists settings_hash varchar") %}
    {% do run_query("alter table build_log add column if not exists identity_hash varchar") %}
{% endmacro %}

{#- The verdict row lives in the Python model's table verdict_py (lookahead.identity.VERDICT_TABLE),
    which the contracted view `verdict` reads: its result_status is written there. -#}
{% macro verdict_exists() %}
  {{ return(run_query("select count(*) from information_schema.tables where table_name = 'verdict_py' "
      ~ "and table_schema = '" ~ target.schema ~ "' and table_type = 'BASE TABLE'").columns[0].values()[0] > 0) }}
{% endmacro %}

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
    {#- the build's tables reach the database file before its status says it passed: a
        failing checkpoint here (a full disk) stops the hook with only the 'started' row
        recorded, so the build reads as unfinished; the rows below are then a few bytes of
        the write-ahead log, checkpointed again at the end -#}
    {% do run_query("checkpoint") %}
    {#- command and selection: `lookahead run` skips a build only after a complete `dbt build`
        (lookahead.identity.build_up_to_date); a `dbt run` runs no test, a selection builds a part -#}
    {#- the resource types too: a build without its data tests is not complete; one without
        the unit tests is what `lookahead run` makes (lookahead.cli.run_build_args) -#}
    {% set selection = [] %}
    {% for flag, option in [('select', '--select'), ('exclude', '--exclude'), ('selector', '--selector'),
        ('resource_types', '--resource-type'), ('exclude_resource_types', '--exclude-resource-type')] %}
      {% set value = invocation_args_dict.get(flag) %}
      {% if value %}
        {% do selection.append(option ~ ' ' ~ (value if value is string else value | join(' '))) %}
      {% endif %}
    {% endfor %}
    {% if invocation_args_dict.get('empty') %}{% do selection.append('--empty') %}{% endif %}
    {{ create_build_log() }}
    {% do run_query("insert into build_log (invocation_id, study_name, status, failed_nodes, message, "
        ~ "finished_at, command, selection) values ('" ~ invocation_id ~ "', lookahead_study_name()"
        ~ ", '" ~ status ~ "', " ~ sql_string(failed | join(', ')) ~ ", " ~ sql_string(messages | first | default(''))
        ~ ", current_timestamp, '" ~ flags.WHICH ~ "', " ~ sql_string(selection | join(' ')) ~ ")") %}
    {% if failed %}
      {% set tables = run_query("select lookahead_result_tables()").columns[0].values()[0].split(',') %}
      {#- views (the contracted result marts) and tables alike, each dropped as what it is -#}
      {% set kinds = run_query("select table_name, table_type from information_schema.tables "
          ~ "where table_catalog = current_database() and table_schema = '" ~ target.schema ~ "'") %}
      {% for row in kinds.rows if row[0] in tables %}
        {% do run_query("drop " ~ ("view" if row[1] == "VIEW" else "table") ~ " if exists "
            ~ target.schema ~ "." ~ row[0]) %}
      {% endfor %}
    {% elif verdict_exists() %}
      {{ mark_verdict(results) }}
    {% endif %}
    {% do run_query("checkpoint") %}
  {% endif %}
{% endmacro %}


{#- The unique id in the graph of the model that writes the verdict row: the Python model
    verdict_py (the view `verdict` reads it; macros/contracts.sql). -#}
{% macro verdict_node_id() %}
  {{ return('model.' ~ project_name ~ '.verdict_py') }}
{% endmacro %}

{#- on-run-end of a build that passed: the verdict row is this build's only when the build
    (re)built it. It is then complete when every node it reads (models and seeds, through
    the graph) was built by this build, or, for a selection (`--select panel+`), when those
    it did not build are current by fingerprint: build_identity, not rebuilt, records the
    settings, input files and code they were built from, and they equal the study's now
    (lookahead_identity_is_current). Either way the verdict and the identity then carry this
    build's invocation id; otherwise the row says which nodes are behind. -#}
{% macro mark_verdict(results) %}
  {% set built = [] %}
  {% for r in results %}
    {% if r.status in ('success', 'pass', 'warn') %}{% do built.append(r.node.unique_id) %}{% endif %}
  {% endfor %}
  {% set verdict_id = verdict_node_id() %}
  {% if verdict_id not in built %}
    {{ return('') }}
  {% endif %}
  {% set seen = [verdict_id] %}
  {#- a study without claim settings has no claim path (docs/claims.md): the claim staging
      the raw-line rejects would read is no ancestor it builds -#}
  {% set no_claims = not study_has_claims() %}
  {#- ancestors, a layer a pass (the project's graph is far less than 40 deep) -#}
  {% for _ in range(40) %}
    {% for id in seen | list if id in graph.nodes %}
      {% for dep in graph.nodes[id].depends_on.nodes %}
        {% if dep not in seen and dep.split('.')[0] in ('model', 'seed', 'snapshot')
            and not (no_claims and 'claims' in graph.nodes[dep].tags) %}{% do seen.append(dep) %}{% endif %}
      {% endfor %}
    {% endfor %}
  {% endfor %}
  {% set behind = [] %}
  {% for id in seen if id not in built %}{% do behind.append(id.split('.')[-1]) %}{% endfor %}
  {% set identity_id = 'model.' ~ project_name ~ '.build_identity' %}
  {% set current = not behind %}
  {% if behind and identity_id not in built %}
    {% set current = run_query("select lookahead_identity_is_current(settings_hash, inputs_fingerprint, "
        ~ "code_fingerprint, raw_reads) from " ~ target.schema ~ ".build_identity").columns[0].values()[0] %}
  {% endif %}
  {% if current %}
    {% do run_query("update " ~ target.schema ~ ".build_identity set invocation_id = '" ~ invocation_id ~ "'") %}
    {% do run_query("update " ~ target.schema ~ ".verdict_py set invocation_id = '" ~ invocation_id
        ~ "', result_status = lookahead_verdict_mark('complete')") %}
  {% else %}
    {% do run_query("update " ~ target.schema ~ ".verdict_py set invocation_id = '" ~ invocation_id
        ~ "', result_status = lookahead_verdict_mark(" ~ sql_string('a selected dbt build (invocation '
        ~ invocation_id ~ ') rebuilt the verdict but not ' ~ (behind | length) ~ ' node(s) it reads (e.g. '
        ~ (behind[:3] | join(', ')) ~ '), whose settings, input files or code changed since they were built; '
        ~ 'run dbt build') ~ ")") %}
  {% endif %}
{% endmacro %}
