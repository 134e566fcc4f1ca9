-- The stored coalition answers of each instance whose claims were extracted: the lines
-- of stg_claim_values (only those whose fields match their key) for the instance's own
-- claim list (its sha256, so an answer for an older extraction is never used) and the
-- study's task kind, one row per coalition mask. int_claim_shapley turns them into
-- v(S) by the task kind (lookahead.claims.tasks) and into Shapley values; an instance
-- with a coalition of its plan missing here is 'values pending'.
with instances as (

    select
        instance_id,
        agent,
        claims_sha256,
        task_kind
    from {{ ref('int_claim_instances') }}
    where extraction_status = 'ok'

),

answers as (

    select
        instance_id,
        agent,
        claims_sha256,
        task_kind,
        mask,
        label_probs,
        value,
        ranking
    from {{ ref('stg_claim_values') }}
    where fields_match

)

select
    answers.instance_id,
    answers.agent,
    answers.claims_sha256,
    answers.task_kind,
    answers.mask,
    cast(answers.label_probs as varchar) as label_probs,
    answers.value,
    cast(answers.ranking as varchar) as ranking
from instances
inner join answers
    on
        instances.instance_id = answers.instance_id
        and instances.agent = answers.agent
        and instances.claims_sha256 = answers.claims_sha256
        and instances.task_kind = answers.task_kind
