-- Min-K%++ LAP (lookahead/measures.py 'minkpp', Zhang et al. 2024): per prompt token
-- after the first, z = (log p(token) - mu) / sigma with mu and sigma^2 the mean and
-- variance of log p over the whole vocabulary at that position (vocab_mean, vocab_var,
-- written into the Min-K% line by the same forward pass); the mean of the lowest
-- max(1, floor(K n)) of the n z-scores (var mink_k, shared with Min-K%). No score for a
-- line with a missing or invalid log-prob, a missing moment or a zero variance. The
-- line's score is computed where the line is parsed (stg_mink_scores, macro minkpp_score).
with scores as (

    select * from {{ ref('stg_mink_scores') }}

),

{{ prompt_measure_rows('scores', 'lap_minkpp') }}
