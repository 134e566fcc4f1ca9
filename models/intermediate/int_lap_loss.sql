-- loss LAP (lookahead/measures.py 'loss'): the mean log-prob of the prompt tokens after
-- the first, from the Min-K% line (the same forward pass). Higher = lower loss = more
-- likely seen. No score for a line with a missing or invalid log-prob.
with lines as (

    {{ prompt_token_lines() }}

),

scores as (

    select
        *,
        {{ mean_token_logprob('after_first') }} as lap_loss
    from lines

),

{{ prompt_measure_rows('scores', 'lap_loss') }}
