{#- A result mart computed by a Python model, exposed as the SQL view users query.

    Why: dbt's `show`, model contracts and unit tests are SQL-only (dbt-core #8467), so a
    Python model such as verdict_py cannot be previewed with `dbt show --select` nor
    contracted. The view `verdict` selects every column its YAML declares, cast to the
    declared data_type, and the contract (config contract: {enforced: true}) makes dbt
    check the view's columns and types against the YAML.

    Why the cast: a column a Python model leaves empty or all null (a study without claim
    settings, a result that could not be estimated) reaches DuckDB from pandas as INTEGER
    whatever it holds elsewhere; cast, it keeps its declared type in every study. A real
    drift still fails the build, before the view is created: a column the Python table
    has that the contract does not declare (or the reverse), or a column stored under
    another type that holds a value the declared type cannot (check_contract_drift). -#}
{% macro contracted_view(relation) -%}
  {%- set columns = model.columns.values() | list if model is mapping and model.get('columns') else [] -%}
  {%- if execute and columns %}{{ check_contract_drift(relation, columns) }}{% endif %}
with computed as (

    select * from {{ relation }}

)

select
  {%- for column in columns %}
    cast({{ adapter.quote(column.name) }} as {{ column.data_type }}) as {{ adapter.quote(column.name) }}
    {{- "," if not loop.last }}
  {%- endfor %}
from computed
{%- endmacro %}


{#- Stop with one line when the Python table and the contract disagree on a column's
    name, or on its type where the column holds a value the declared type cannot hold (an
    all-null column's type says nothing: see contracted_view; a whole DOUBLE fits BIGINT).
    Nothing is checked while the table does not exist yet (dbt compile or docs generate
    on a fresh database). -#}
{% macro check_contract_drift(relation, columns) %}
  {%- set stored = adapter.get_columns_in_relation(relation) -%}
  {%- if stored | length == 0 %}{{ return('') }}{% endif -%}
  {%- set declared = {} -%}
  {%- for column in columns %}{% do declared.update({column.name | lower: column.data_type | upper}) %}{% endfor -%}
  {%- set found = {} -%}
  {%- for column in stored %}{% do found.update({column.name | lower: column.dtype | upper}) %}{% endfor -%}
  {%- set extra = found.keys() | reject('in', declared) | list -%}
  {%- set missing = declared.keys() | reject('in', found) | list -%}
  {%- if extra or missing %}
    {{ exceptions.raise_compiler_error(
        "contract of '" ~ model.name ~ "': " ~ relation.identifier ~ " has "
        ~ ((("column(s) " ~ extra | join(', ') ~ " not declared") if extra else "")
           ~ ("; " if extra and missing else "")
           ~ (("no column(s) " ~ missing | join(', ') ~ " declared") if missing else ""))
        ~ " in " ~ model.patch_path.split('://')[-1] ~ "; declare each column with its data_type there") }}
  {%- endif %}
  {%- set differ = [] -%}
  {%- for name, dtype in found.items() if dtype != declared[name] %}{% do differ.append(name) %}{% endfor -%}
  {%- if differ %}
    {#- per column, the values the declared type cannot hold as stored: any value, except
        between numbers, where a whole number fits an integer type and any number a
        floating one (pandas stores an integer column with a missing value as DOUBLE) -#}
    {%- set integers = ['TINYINT', 'SMALLINT', 'INTEGER', 'BIGINT', 'HUGEINT'] -%}
    {%- set numbers = integers + ['UTINYINT', 'USMALLINT', 'UINTEGER', 'UBIGINT', 'FLOAT', 'DOUBLE'] -%}
    {%- set parts = [] -%}
    {%- for name in differ %}
      {%- set col = adapter.quote(name) -%}
      {%- set numeric = (found[name] in numbers or found[name].startswith('DECIMAL'))
          and (declared[name] in numbers or declared[name].startswith('DECIMAL')) -%}
      {%- if numeric and declared[name] not in integers %}{% do parts.append("0") %}
      {%- elif numeric %}{% do parts.append("count(*) filter (where " ~ col ~ " <> round(" ~ col ~ "))") %}
      {%- else %}{% do parts.append("count(" ~ col ~ ")") %}{% endif -%}
    {%- endfor -%}
    {%- set held = run_query("select " ~ parts | join(", ") ~ " from " ~ relation).rows[0] -%}
    {%- for name in differ %}
      {%- if held[loop.index0] > 0 %}
        {{ exceptions.raise_compiler_error(
            "contract of '" ~ model.name ~ "': column " ~ name ~ " of " ~ relation.identifier ~ " is "
            ~ found[name] ~ " where the contract declares " ~ declared[name] ~ " ("
            ~ model.patch_path.split('://')[-1] ~ "): fix the type the package writes, or the declaration") }}
      {%- endif %}
    {%- endfor %}
  {%- endif %}
{% endmacro %}
