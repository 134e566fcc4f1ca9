-- Re-predictions from the extracted claims alone (llm_jobs/claims_repredict.py) of the
-- study's claim model, typed: one line per (instance, agent, rationale sha256, task
-- kind), the last written. The answer text and top log-probs are parsed by the task
-- kind in claims_repredict (lookahead.claims.tables). A line whose fields do not hash to
-- its key is kept beside (fields_match false), for raw_line_rejects to name, and never used.
with lines as (

    {{ claim_lines('claims_repredict') }}

)

select
    key,
    task,
    model_id,
    row_id,
    instance_id,
    agent,
    rationale_sha256,
    task_kind,
    response_text,
    top_logprobs,
    label_probs,
    value,
    ranking,
    coalesce(attempts, 1) as attempts,
    fields_match,
    line_number
from lines
where model_id = {{ claim_model_id() }}
qualify row_number() over (
    partition by instance_id, agent, rationale_sha256, task_kind, fields_match
    order by line_number desc
) = 1
