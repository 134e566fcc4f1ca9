-- loss LAP (lookahead/measures.py 'loss'): the mean log-prob of the prompt tokens after
-- the first, from the Min-K% line (the same forward pass). Higher = lower loss = more
-- likely seen. No score for a line with a missing or invalid log-prob. The line's score
-- is computed where the line is parsed (stg_mink_scores, macro mean_token_logprob).
with scores as (

    select * from {{ ref('stg_mink_scores') }}

),

{{ prompt_measure_rows('scores', 'lap_loss') }}
