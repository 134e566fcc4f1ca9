-- Input rows that passed validation and are in the study's subsample (all valid rows
-- unless subsample_rows is set); the ones that failed are in `rejected_rows`.
select
    row_id,
    source_row_number,
    entity_id,
    entity_name,
    ticker,
    text,
    text_date,
    target_date,
    outcome
    {%- for extra in setting('extra_columns') %},
    {{ sql_identifier(extra) }}
    {%- endfor %}
from {{ ref('stg_observations') }}
where reject_reason is null and in_subsample
