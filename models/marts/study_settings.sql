-- The study settings this build used (dbt vars), one row, so every result table can be
-- traced to its configuration and the dbt Python models read settings from one place.
select
    {{ sql_string(var('study_name', 'study')) }} as study_name,
    {{ sql_string(var('data_path')) }} as data_path,
    {{ sql_string(var('raw_dir')) }} as raw_dir,
    {{ sql_string(var('model_id')) }} as model_id,
    {{ sql_string(var('backend')) }} as backend,
    date {{ sql_string(var('training_cutoff')) }} as training_cutoff,
    {{ sql_string(var('period_frequency')) }} as period_frequency,
    {{ var('fiscal_year_end_month') }} as fiscal_year_end_month,
    {{ sql_string(var('cluster')) }} as cluster,
    {{ sql_string(var('paper_cluster', 'date')) }} as paper_cluster,
    {{ sql_string(var('high_lap_rule')) }} as high_lap_rule,
    cast({{ var('nw_lag', none) if var('nw_lag', none) is not none else 'null' }} as integer) as nw_lag,
    cast({{ var('lap_min_sd', none) if var('lap_min_sd', none) is not none else 'null' }} as double) as lap_min_sd,
    cast({{ var('wild_bootstrap_draws', 999) }} as integer) as wild_bootstrap_draws,
    {{ sql_string(var('wild_bootstrap_weights', 'webb')) }} as wild_bootstrap_weights,
    cast({{ var('wild_bootstrap_seed', 20240101) }} as integer) as wild_bootstrap_seed,
    cast({{ var('wild_bootstrap_min_clusters', 50) }} as integer) as wild_bootstrap_min_clusters,
    {{ sql_string(var('lap_measure')) }} as lap_measure,
    cast({{ var('mink_k') }} as double) as mink_k,
    {{ sql_string(var('mink_mean')) }} as mink_mean,
    {{ sql_string(var('outcome_description')) }} as outcome_description,
    {{ sql_string(var('reference_period')) }} as reference_period,
    {{ sql_string(tojson(var('forecast_labels'))) }} as forecast_labels,
    {{ sql_string(tojson(var('recall_labels'))) }} as recall_labels,
    nullif({{ sql_string(var('moderator_column', none) or '') }}, '') as moderator_column,
    cast({{ var('bootstrap_draws', 10000) }} as integer) as bootstrap_draws,
    cast({{ var('bootstrap_seed', 20240101) }} as integer) as bootstrap_seed,
    {% if var('paper_oos_start', none) is not none -%}
    date {{ sql_string(var('paper_oos_start')) }}
    {%- else -%}
    cast(null as date)
    {%- endif %} as paper_oos_start
