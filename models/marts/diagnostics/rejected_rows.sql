-- Input rows that failed validation, kept whole with the reason (nothing is lost).
select
    source_row_number,
    row_id,
    reject_reason,
    entity_id,
    entity_name,
    ticker,
    text,
    text_date_raw,
    target_date_raw,
    outcome_raw
from {{ ref('stg_observations') }}
where reject_reason is not null
