-- loss LAP (lookahead/measures.py 'loss'): the mean log-prob of the prompt tokens after
-- the first, from the Min-K% line (the same forward pass). Higher = lower loss = more
-- likely seen. No score for a line with a missing or invalid log-prob.
with lines as (

    {{ prompt_token_lines() }}

),

scores as (

    select
        *,
        case when not {{ has_bad_logprob('after_first') }} then
            list_avg(list_transform(after_first, lambda t: t.logprob))
        end as lap_loss
    from lines

),

{{ prompt_measure_rows('scores', 'lap_loss') }}
