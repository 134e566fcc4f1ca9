{#- Small helpers that turn study vars into SQL, so each rule is written once. -#}

{% macro mapped_column(protocol_col) -%}
  {%- set user_col = var('column_map').get(protocol_col) -%}
  {%- if user_col -%} cast("{{ user_col }}" as varchar)
  {%- else -%} cast(null as varchar)
  {%- endif -%}
{%- endmacro %}


{#- Deterministic row_id when the input has none: first 16 hex of
    sha256(entity_id | ISO text_date | text), the same rule as lookahead/rows.py. -#}
{% macro derived_row_id(entity_id, text_date_iso, text) -%}
  substr(sha256({{ entity_id }} || '|' || {{ text_date_iso }} || '|' || {{ text }}), 1, 16)
{%- endmacro %}


{#- Realization period of a date at the configured frequency (var period_frequency). -#}
{% macro period_label(date_col) -%}
  {%- set freq = var('period_frequency') -%}
  {%- if freq in ('trading_day', 'day') -%} strftime({{ date_col }}, '%Y-%m-%d')
  {%- elif freq == 'week' -%} strftime(date_trunc('week', {{ date_col }}), '%G-W%V')
  {%- elif freq == 'month' -%} strftime({{ date_col }}, '%Y-%m')
  {%- elif freq == 'fiscal_quarter' -%}
    {%- set shift = 12 - var('fiscal_year_end_month') -%}
    'FY' || cast(year({{ date_col }} + interval {{ shift }} month) as varchar)
      || 'Q' || cast(quarter({{ date_col }} + interval {{ shift }} month) as varchar)
  {%- endif -%}
{%- endmacro %}


{% macro sql_string(value) -%}
  '{{ value | replace("'", "''") }}'
{%- endmacro %}
