-- The agent jobs' final answers (llm_jobs/claims_rationale.py, claims_timespec.py) of the
-- study's claim model, typed: the instances they predicted, one line per (instance,
-- agent), the last written (a rerun with a new prompt), a TimeSPEC line after a
-- rationale line (lookahead.claims.inputs.AGENT_RAW_TASKS). A TimeSPEC line whose
-- rationale is only its validated claims' text carries them as that text's extraction
-- (`claims`; null when its aggregator wrote the rationale, which the extraction job
-- extracts). A line whose fields do not hash to its key is kept
-- beside (fields_match false), for raw_line_rejects to name, and never used.
with lines as (

    select 1 as task_order, * from ({{ claim_lines('claims_rationale') }}) as rationale
    union all by name
    select 2 as task_order, * from ({{ claim_lines('claims_timespec') }}) as timespec

)

select
    key,
    task,
    model_id,
    row_id,
    instance_id,
    agent,
    entity,
    task_name,
    t_ref,
    task_input,
    prediction,
    rationale,
    outcome,
    probability,
    error,
    claims,
    fields_match,
    task_order,
    line_number
from lines
where model_id = {{ claim_model_id() }}
    and final
qualify row_number() over (
    partition by instance_id, agent, fields_match
    order by task_order desc, line_number desc
) = 1
