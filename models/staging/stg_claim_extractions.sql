-- Claim extraction answers (llm_jobs/claims_extract.py) of the study's claim model, typed:
-- one line per (instance, agent, rationale sha256), the one the claim tables use: the
-- last schema-valid attempt, else the last attempt (a later attempt after an invalid
-- answer supersedes it; a valid answer is never superseded by an invalid one). A line
-- whose fields do not hash to its key (fields_match false) is kept beside, for
-- raw_line_rejects to name, and never used.
with lines as (

    {{ claim_lines('claims_extract') }}

)

select
    key,
    task,
    model_id,
    row_id,
    instance_id,
    agent,
    rationale_sha256,
    attempt,
    coalesce(valid, false) as valid,
    error,
    claims,
    fields_match,
    line_number
from lines
where model_id = {{ claim_model_id() }}
qualify row_number() over (
    partition by instance_id, agent, rationale_sha256, fields_match
    order by coalesce(valid, false) desc, line_number desc
) = 1
