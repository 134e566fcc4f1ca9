-- Input rows that passed validation; the ones that did not are in `rejected_rows`.
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
    {%- for extra in var('extra_columns', []) %},
    "{{ extra }}"
    {%- endfor %}
from {{ ref('stg_observations') }}
where reject_reason is null
