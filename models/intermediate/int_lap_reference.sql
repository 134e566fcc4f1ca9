-- Reference-model LAP (lookahead/measures.py 'reference'; Carlini et al. 2021): the
-- target's mean log-prob of the prompt tokens after the first (int_lap_loss, from the
-- Min-K% line) minus the same mean under the study's reference model (setting
-- reference_model_id; its own raw task `reference`, the same prompt). Higher = the
-- target finds the text likelier than a model that did not see it = more likely seen:
-- the paper's "target loss minus reference loss" with its sign turned. No score for a
-- row without a target loss or with a missing or invalid reference log-prob.
with target as (

    select * from {{ ref('int_lap_loss') }}

),

lines as (

    {{ prompt_token_lines('reference') }}

),

reference_losses as (

    select
        *,
        {{ mean_token_logprob('after_first') }} as reference_loss
    from lines

),

scores as (

    select
        reference_losses.*,
        target.lap_loss - reference_losses.reference_loss as lap_reference
    from reference_losses
    inner join target
        on reference_losses.row_id = target.row_id

),

{{ prompt_measure_rows('scores', 'lap_reference', task='reference', model_id=setting('reference_model_id') or '') }}
