-- Valid rows with their forecast (many-to-one on row_id) and every LAP measure of the
-- registry (lookahead/measures.py, read here through the generated macro
-- lap_measure_registry): each measure's model joined on its keys (recall on entity_id
-- and target_date, the prompt measures on row_id), its score as lap_<measure>; `lap` is
-- the one var lap_measure names. Row counts before and after each merge are in
-- `merge_row_counts` and checked by gate_panel. A row with an LLM query refused for good
-- (int_refused_rows) leaves the panel here: it is in rejected_rows with the reason.
{%- set measures = lap_measure_registry() %}
with observations as (

    select * from {{ ref('int_observations_valid') }}

),

forecasts as (

    select * from {{ ref('int_forecasts') }}

),

refused as (

    select row_id from {{ ref('int_refused_rows') }}

){% for m in measures %},

{{ m.name }} as (

    select * from {{ ref(m.model) }}

){% endfor %}

select
    observations.*,
    case
        when observations.target_date <= date {{ sql_string(setting('training_cutoff')) }} then 'pre'
        else 'post'
    end as sample,
    {{ period_label('observations.target_date') }} as period,
    forecasts.forecast_key,
    forecasts.response_text,
    forecasts.forecast_label,
    forecasts.mu_hat,
    forecasts.parse_status,
    forecasts.first_token_prob,
    forecasts.stated_confidence,
    {%- for m in measures %}
    {%- if m.key_column %}
    {{ m.name }}.{{ m.key_column }},
    {%- endif %}
    {%- for c in m.carried %}
    {{ m.name }}.{{ c }},
    {%- endfor %}
    {{ m.name }}.{{ m.model_column }} as {{ m.column }},
    {%- if m.name == setting('lap_measure') %}
    {{ m.name }}.{{ m.model_column }} as lap,
    {%- endif %}
    {%- endfor %}
    coalesce(forecasts.approximated, false) or coalesce(recall.approximated, false) as approximated
from observations
left join forecasts on observations.row_id = forecasts.row_id
{%- for m in measures %}
left join {{ m.name }}
    on
    {%- for c in m.join_on %}
        {{ 'and ' if not loop.first }}observations.{{ c }} = {{ m.name }}.{{ c }}
    {%- endfor %}
{%- endfor %}
where not exists (select 1 from refused where refused.row_id = observations.row_id)
