-- high_lap is 1 exactly when the LAP compared (the row's own LAP under pooled_median,
-- its entity's mean LAP in the sample under entity_mean_median) is strictly above the
-- sample's threshold lap_median. Rows listed here break the rule.
with panel as (

    select * from {{ ref('panel') }}

),

compared as (

    select
        row_id,
        sample,
        high_lap,
        lap_median,
        {%- if setting('high_lap_rule') == 'entity_mean_median' %}
        avg(lap) over (partition by sample, entity_id) as lap_compared
        {%- else %}
        lap as lap_compared
        {%- endif %}
    from panel

)

select * from compared
where lap_compared is not null
  and (high_lap = 1) != (lap_compared > lap_median)
