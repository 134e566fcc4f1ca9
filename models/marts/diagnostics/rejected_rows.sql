-- Input rows that failed validation, and valid rows excluded because an LLM query was
-- refused for good (int_refused_rows), kept whole with the reason (nothing is lost).
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
union all
select
    observations.source_row_number,
    observations.row_id,
    refused.exclude_reason as reject_reason,
    observations.entity_id,
    observations.entity_name,
    observations.ticker,
    observations.text,
    observations.text_date_raw,
    observations.target_date_raw,
    observations.outcome_raw
from {{ ref('stg_observations') }} as observations
inner join {{ ref('int_refused_rows') }} as refused on observations.row_id = refused.row_id
