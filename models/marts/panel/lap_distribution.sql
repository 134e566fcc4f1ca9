-- LAP distribution pre vs post cutoff (protocol step 2 sanity check), for each LAP
-- measure that was computed (the registry's, lookahead/measures.py). Expect LAP visibly
-- lower post-cutoff.
with long as (
    {% for m in lap_measure_registry() %}
    select sample, {{ sql_string(m.name) }} as measure, {{ m.column }} as lap from {{ ref('panel') }}
    {{ 'union all' if not loop.last }}
    {%- endfor %}

)

select
    sample,
    measure,
    measure = {{ sql_string(setting('lap_measure')) }} as is_selected_measure,
    count(lap) as n,
    avg(lap) as mean,
    stddev_samp(lap) as sd,
    min(lap) as min,
    quantile_cont(lap, 0.25) as p25,
    quantile_cont(lap, 0.5) as median,
    quantile_cont(lap, 0.75) as p75,
    max(lap) as max
from long
where lap is not null
group by sample, measure
