-- The analysis panel: one row per valid input row with integer group ids for the fixed
-- effects (entity_num, period_num), the pre/post-cutoff sample and the high-LAP split.
-- high_lap is computed within each sample: pooled_median compares each row's LAP with
-- the sample's median LAP; entity_mean_median compares each entity's mean LAP with the
-- median of entity means (for noisy within-entity LAP), so the split is by entity.
-- A row without LAP (NULL: e.g. a censored recall answer) is in neither half: high_lap is
-- NULL there, so the validation halves never count it as low-LAP; the verdict counts them.
-- Memory: the fixed-effect ids are numbered over the distinct entities and periods and
-- joined back, and `merged` is not materialized, so no operator holds a copy of every
-- merged row (a window over the whole rows, or a materialized CTE of all of them, took
-- 300 MiB at 91,361 rows; this takes 136 MiB, about what writing the table takes).
with merged as not materialized (

    select * from {{ ref('int_panel_merged') }}

),

entity_numbers as (

    select
        entity_id,
        row_number() over (order by entity_id) as entity_num
    from (select distinct entity_id from merged) as entities

),

period_numbers as (

    select
        period,
        row_number() over (order by period) as period_num
    from (select distinct period from merged) as periods

),

numbered as (

    select
        merged.*,
        entity_numbers.entity_num,
        period_numbers.period_num
    from merged
    left join entity_numbers on merged.entity_id = entity_numbers.entity_id
    left join period_numbers on merged.period = period_numbers.period

),

entity_means as (

    select
        sample,
        entity_id,
        avg(lap) as entity_mean_lap
    from merged
    group by sample, entity_id

),

thresholds as (

    {%- if setting('high_lap_rule') == 'entity_mean_median' %}
    select sample, median(entity_mean_lap) as lap_median
    from entity_means
    group by sample
    {%- else %}
    select sample, median(lap) as lap_median
    from merged
    group by sample
    {%- endif %}

)

select
    numbered.row_id,
    numbered.entity_id,
    numbered.entity_name,
    numbered.ticker,
    numbered.entity_num,
    numbered.text_date,
    numbered.target_date,
    numbered.period,
    numbered.period_num,
    numbered.sample,
    numbered.outcome,
    numbered.mu_hat,
    numbered.forecast_label,
    numbered.parse_status,
    numbered.p_up,
    numbered.p_down,
    numbered.p_unknown,
    numbered.up_censored,
    numbered.down_censored,
    numbered.residual_mass,
    numbered.ud,
    {%- for m in lap_measure_registry() %}
    numbered.{{ m.column }},
    {%- endfor %}
    numbered.lap,
    thresholds.lap_median,
    {%- if setting('high_lap_rule') == 'entity_mean_median' %}
    case
        when numbered.lap is null then null
        when entity_means.entity_mean_lap > thresholds.lap_median then 1
        else 0
    end as high_lap,
    {%- else %}
    case
        when numbered.lap is null then null
        when numbered.lap > thresholds.lap_median then 1
        else 0
    end as high_lap,
    {%- endif %}
    numbered.first_token_prob,
    numbered.stated_confidence,
    numbered.approximated,
    numbered.forecast_key,
    numbered.recall_key,
    numbered.mink_key
    {%- for extra in setting('extra_columns') %},
    numbered.{{ sql_identifier(extra) }}
    {%- endfor %}
from numbered
left join thresholds on numbered.sample = thresholds.sample
left join entity_means
    on numbered.sample = entity_means.sample
    and numbered.entity_id = entity_means.entity_id
