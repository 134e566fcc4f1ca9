{#- Small helpers that turn study vars into SQL, so each rule is written once. -#}

{#- Realization period of a date at the configured frequency (var period_frequency). -#}
{% macro period_label(date_col) -%}
  {%- set freq = setting('period_frequency') -%}
  {%- if freq in ('trading_day', 'day') -%} strftime({{ date_col }}, '%Y-%m-%d')
  {%- elif freq == 'week' -%} strftime(date_trunc('week', {{ date_col }}), '%G-W%V')
  {%- elif freq == 'month' -%} strftime({{ date_col }}, '%Y-%m')
  {%- elif freq == 'fiscal_quarter' -%}
    {%- set shift = 12 - setting('fiscal_year_end_month') -%}
    'FY' || cast(year({{ date_col }} + interval {{ shift }} month) as varchar)
      || 'Q' || cast(quarter({{ date_col }} + interval {{ shift }} month) as varchar)
  {%- endif -%}
{%- endmacro %}


{#- The one way a value becomes SQL text: a string literal with its quotes doubled (DuckDB
    reads backslashes literally; the settings loader refuses NUL and, outside prompts,
    control characters). A setting is never joined to SQL with `~`
    (tests/python/test_hostile_settings.py fails on a setting joined by tilde); paths reach SQL as
    the plugin's variables instead (getvariable, lookahead/dbt_plugin.py use_study). -#}
{% macro sql_string(value) -%}
  '{{ value | string | replace("'", "''") }}'
{%- endmacro %}


{#- A column name from the study (column_map, extra_columns) as a quoted identifier, its
    double quotes doubled: the one way such a name reaches SQL. -#}
{% macro sql_identifier(name) -%}
  "{{ name | string | replace('"', '""') }}"
{%- endmacro %}


{#- How many raw files named `file_name` lie under the study's raw_dir (any depth): the
    folder is read from the plugin's variable lookahead_study.raw_dir, never pasted into SQL;
    `file_name` is a task's file name written in the project (forecast.jsonl, ...). -#}
{% macro raw_file_count(file_name) -%}
  {{ return(run_query("select count(*) from glob(getvariable('lookahead_study').raw_dir || '/**/' || "
                      ~ sql_string(file_name) ~ ")").columns[0].values()[0]) }}
{%- endmacro %}


{#- The characters Python's str.strip() removes (str.isspace: ASCII whitespace, the
    information separators 0x1c-0x1f, NEL, NBSP and the Unicode space separators), as one
    SQL string literal, so that SQL strips a decoded token exactly as the protocol's
    Python rule does. A literal, not chr() calls: DuckDB would rebuild the set for every
    token. tests/python/test_scoring_oracle.py checks this list against str.isspace. -#}
{% macro python_whitespace() -%}
  {%- set ws = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000" -%}
  '{{ ws }}'
{%- endmacro %}


{#- A decoded token normalised as Python's token.strip().lower(): DuckDB's lower() maps
    U+0130 (capital I with dot) to 'i' where Python gives 'i' + U+0307, so that one
    character is rewritten first. -#}
{% macro py_strip_lower(expr) -%}
  lower(replace(trim({{ expr }}, {{ python_whitespace() }}), '{{ "\u0130" }}', '{{ "i\u0307" }}'))
{%- endmacro %}


{#- Log-probs that must not feed a score: NaN, infinite or positive (a probability
    above 1). Used to count them per raw line for the gates. -#}
{% macro is_invalid_logprob(expr) -%}
  (isnan({{ expr }}) or isinf({{ expr }}) or {{ expr }} > 0)
{%- endmacro %}


{#- One line per answer: the same answer in several shards counts once, the first
    written (lookahead.cache.lookup.wins_over: earliest finished_at, then the shard's path). A
    line whose fields disagree with its key stays, for raw_line_rejects to name, beside
    the matching line of the same key and row (fields_match is part of the answer). The last
    clause of a staging model's final select, on the raw columns of `relation` (its last
    CTE), so the ranking carries the scored columns only: ranking the raw lines with their
    log-prob lists took a fifth of staging's time at 1M lines. -#}
{% macro first_written_line(relation, prefer=none) -%}
qualify row_number() over (
    partition by {% for c in ['key', 'task', 'model_id', 'row_id', 'entity_id', 'target_date', 'fields_match'] -%}
        {{ relation }}.{{ c }}{{ ', ' if not loop.last }}
    {%- endfor %}
    order by {{ (prefer ~ ', ') if prefer }}{{ relation }}.finished_at, {{ relation }}.filename
) = 1
{%- endmacro %}


{#- Whether a raw line's own fields hash to its key (lookahead.keys.fields_key): sha256
    of task|model_id|ident|query_text|params, ident the row_id (entity_id|target_date for
    recall), params the study's own for `task` (the plugin sets lookahead_study.key_params_<task>
    from lookahead.keys.task_params), never null. Why: a line is selected by its key, and
    the key alone cannot show that the answer beside it is that query's; a line copied
    under another row's key and row_id, or whose query text was edited, hashes to another
    key. Such a line is never used (int_*_lines, prompt_measure_rows), is listed in
    raw_line_rejects, and its query is asked again by the job (first_written_line ranks
    matching and other lines apart, so the answer asked again is used however late it was
    written, and the rewritten line stays for raw_line_rejects). The study's params rather than
    the line's: DuckDB has no canonical JSON writer to rebuild params_json from the line
    (the jobs' check, in Python, hashes the line's own). -#}
{#- The raw lines of a prompt-scoring task (`relation`, its source), each under the key of
    the forward pass it holds (lookahead.keys.line_key): a line keyed when its params also
    named the extras it carries (lookahead.keys.legacy_key_params; the plugin sets
    lookahead_study.legacy_key_params_<task>) is read under the key its fields hash to without
    them, so a cache written before serves the study with nothing asked again. Every raw
    column, `key` replaced, plus fields_match (the rule of `fields_match` below, either
    params accepted). The older params are hashed only for a line whose key is not the
    study's (a CASE evaluates a branch only on the rows that reach it). -#}
{% macro forward_pass_lines(task, relation) -%}
    select
        * exclude (key_text, fields_key, legacy_match) replace (
            case when legacy_match then fields_key else key end as key),
        key = fields_key or legacy_match as fields_match
    from (
        select
            *,
            case when key = fields_key then false
                else coalesce(list_contains(list_transform(
                    getvariable('lookahead_study')[{{ sql_string('legacy_key_params_' ~ task) }}],
                    lambda p: sha256(key_text || p)), key), false)
            end as legacy_match
        from (
            select *, sha256(key_text || getvariable('lookahead_study')[{{ sql_string('key_params_' ~ task) }}]) as fields_key
            from (
                select *, coalesce(task || '|' || model_id || '|' || row_id || '|' || query_text || '|', '') as key_text
                from {{ relation }}
                where key is not null
            ) as texts
        ) as hashed
    ) as matched
{%- endmacro %}


{#- Whether a token list (a line's prompt tokens after the first) carries the vocabulary
    moments at every position (lookahead.tasks LINE_EXTRA_BITS, the same test). -#}
{% macro has_vocab_moments(tokens) -%}
    (len({{ tokens }}) > 0 and not coalesce(list_bool_or(list_transform({{ tokens }},
        lambda t: t.vocab_mean is null or t.vocab_var is null or not isfinite(t.vocab_mean)
            or not isfinite(t.vocab_var) or t.vocab_var < 0)), true))
{%- endmacro %}


{#- How `first_written_line` ranks a prompt-scoring task's lines of one key before the
    first written (lookahead.cache.lookup.wins_over): a line carrying the extras the study needs
    (the plugin's lookahead_study.line_needs_<task>) first, then the line carrying more of
    them (the same forward pass, more of it kept). `has_zlib` and `has_moments` are
    boolean columns of the ranked relation. -#}
{% macro extras_preference(task, relation) -%}
    {%- set needs = "getvariable('lookahead_study')[" ~ sql_string('line_needs_' ~ task) ~ "]" -%}
    (coalesce(list_contains({{ needs }}, 'zlib_bytes'), false) and not {{ relation }}.has_zlib
        or coalesce(list_contains({{ needs }}, 'vocab_moments'), false) and not {{ relation }}.has_moments),
    {{ relation }}.has_zlib::int + {{ relation }}.has_moments::int desc
{%- endmacro %}


{% macro fields_match(task) -%}
  coalesce(key = sha256(
      task || '|' || model_id || '|'
      || {{ "entity_id || '|' || target_date" if task == 'recall' else 'row_id' }}
      || '|' || query_text || '|' || getvariable('lookahead_study')[{{ sql_string('key_params_' ~ task) }}]
  ), false)
{%- endmacro %}
