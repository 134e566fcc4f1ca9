-- The analysis panel: one row per valid input row with integer group ids for the fixed
-- effects (entity_num, period_num), the pre/post-cutoff sample and the high-LAP split.
-- high_lap is computed within each sample: pooled_median compares each row's LAP with
-- the sample's median LAP; entity_mean_median compares each entity's mean LAP with the
-- median of entity means (for noisy within-entity LAP), so the split is by entity.
with merged as (

    select * from {{ ref('int_panel_merged') }}

),

numbered as (

    select
        *,
        dense_rank() over (order by entity_id) as entity_num,
        dense_rank() over (order by period) as period_num
    from merged

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

    {%- if var('high_lap_rule') == 'entity_mean_median' %}
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
    numbered.lap_recall,
    numbered.lap_mink,
    numbered.lap,
    thresholds.lap_median,
    {%- if var('high_lap_rule') == 'entity_mean_median' %}
    case when entity_means.entity_mean_lap > thresholds.lap_median then 1 else 0 end as high_lap,
    {%- else %}
    case when numbered.lap > thresholds.lap_median then 1 else 0 end as high_lap,
    {%- endif %}
    numbered.first_token_prob,
    numbered.stated_confidence,
    numbered.approximated,
    numbered.forecast_key,
    numbered.recall_key,
    numbered.mink_key
    {%- for extra in var('extra_columns', []) %},
    numbered."{{ extra }}"
    {%- endfor %}
from numbered
left join thresholds on numbered.sample = thresholds.sample
left join entity_means
    on numbered.sample = entity_means.sample
    and numbered.entity_id = entity_means.entity_id
