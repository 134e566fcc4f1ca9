-- Recall answers of the current study, one per (entity_id, target_date): the lines whose
-- key the study asks for (int_expected_keys) and whose fields agree with it. The jobs
-- query each pair once, so a duplicate here is a cache fault and fails gate_recall_pairs.
with answers as (

    select * from {{ ref('stg_recall_responses') }}

),

expected as (

    select * from {{ ref('int_expected_keys') }}
    where task = 'recall'

)

select
    answers.key as recall_key,
    answers.entity_id,
    answers.target_date,
    answers.p_up,
    answers.p_down,
    answers.p_unknown,
    answers.up_censored,
    answers.down_censored,
    answers.unknown_censored,
    answers.lap,
    answers.ud,
    answers.residual_mass,
    answers.censor_bound,
    answers.n_returned,
    answers.n_invalid_logprobs,
    answers.clamped_logprobs,
    answers.approximated,
    answers.probability_method
from answers
inner join expected
    on answers.key = expected.key
where answers.task = 'recall'
    and answers.fields_match
    and answers.entity_id = expected.entity_id
    and strftime(answers.target_date, '%Y-%m-%d') = expected.target_date
    and answers.model_id = {{ sql_string(setting('model_id')) }}
