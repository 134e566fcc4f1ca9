-- Support judgments (llm_jobs/claims_support.py, claims_support_judge llm) of the study's
-- claim model, typed: one line per (claim sha256, document), the first written with a
-- judgment. A line whose fields do not hash to its key is kept beside (fields_match
-- false), for raw_line_rejects to name, and never used.
with lines as (

    {{ claim_lines('claims_support') }}

)

select
    key,
    task,
    model_id,
    row_id,
    claim_sha256,
    doc_id,
    supports,
    fields_match,
    line_number
from lines
where model_id = {{ claim_model_id() }}
    and supports is not null
qualify row_number() over (
    partition by claim_sha256, doc_id, fields_match
    order by line_number
) = 1
