-- The study this build is for, one row: every setting as resolved by the package
-- (lookahead.config.dbt_study, through the project's DuckDB plugin: the study of --vars,
-- of $LOOKAHEAD_STUDY_SETTINGS or the default one) in settings_json, its hash, and
-- the settings analysts filter on as typed columns. The dbt Python models rebuild their
-- one settings object from settings_json, so statistics, paper tables and report read the
-- same values the jobs used.
{%- set columns = [
    ('study_name', 'varchar'), ('data_path', 'varchar'), ('raw_dir', 'varchar'),
    ('model_id', 'varchar'), ('backend', 'varchar'), ('training_cutoff', 'date'),
    ('period_frequency', 'varchar'), ('fiscal_year_end_month', 'integer'),
    ('cluster', 'varchar'), ('paper_cluster', 'varchar'), ('high_lap_rule', 'varchar'),
    ('nw_lag', 'integer'), ('lap_min_sd', 'double'), ('lap_measure', 'varchar'),
    ('wild_bootstrap_draws', 'integer'), ('wild_bootstrap_weights', 'varchar'),
    ('wild_bootstrap_seed', 'integer'),
    ('paper_oos_start', 'date'),
    ('mink_k', 'double'), ('mink_mean', 'varchar'), ('outcome_description', 'varchar'),
    ('reference_period', 'varchar'), ('moderator_column', 'varchar'),
    ('bootstrap_draws', 'integer'), ('bootstrap_seed', 'integer'),
    ('subsample_rows', 'bigint'), ('subsample_seed', 'bigint'),
    ('accept_low_parse_rate', 'boolean')] %}
{%- if execute %}
  {%- set settings = run_query("select lookahead_study_json()").columns[0].values()[0] %}
{%- else %}
  {%- set settings = '{}' %}
{%- endif %}
with resolved as (

    select {{ sql_string(settings) }} as settings_json

)

select
    {%- for name, type in columns %}
    cast(json_extract_string(settings_json, '$.{{ name }}') as {{ type }}) as {{ name }},
    {%- endfor %}
    json_extract(settings_json, '$.forecast_labels')::varchar as forecast_labels,
    json_extract(settings_json, '$.recall_labels')::varchar as recall_labels,
    settings_json,
    lookahead_settings_hash(settings_json) as settings_hash
from resolved
