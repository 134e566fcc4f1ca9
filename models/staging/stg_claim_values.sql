-- Coalition answers (llm_jobs/claims_value.py) of the study's claim model, typed: one line
-- per (instance, agent, claim list sha256, coalition mask, task kind), the first written,
-- among the lines of the study's coalition prompt and value (claims_coalition_prompt,
-- claims_coalition_value).
-- The answer is the task kind's (lookahead.claims.tasks coalition_answer): label_probs
-- (classification), value (regression) or ranking; only parsed answers are written. A line
-- whose fields do not hash to its key is kept beside (fields_match false), for
-- raw_line_rejects to name, and never used.
with lines as (

    {{ claim_lines('claims_value') }}

)

select
    key,
    task,
    model_id,
    row_id,
    instance_id,
    agent,
    claims_sha256,
    mask,
    task_kind,
    label_probs,
    value,
    ranking,
    fields_match,
    line_number
from lines
where
    model_id = {{ claim_model_id() }}
    -- the study's coalition prompt and value reading only (a line written before they
    -- were recorded: the legacy prompt, read from label tokens)
    and coalesce(params ->> 'coalition_prompt', 'legacy') = {{ sql_string(setting('claims_coalition_prompt')) }}
    and coalesce(params ->> 'coalition_value', 'token') = {{ sql_string(setting('claims_coalition_value')) }}
qualify row_number() over (
    partition by instance_id, agent, claims_sha256, mask, task_kind, fields_match
    order by line_number
) = 1
