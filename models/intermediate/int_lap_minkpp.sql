-- Min-K%++ LAP (lookahead/measures.py 'minkpp', Zhang et al. 2024): per prompt token
-- after the first, z = (log p(token) - mu) / sigma with mu and sigma^2 the mean and
-- variance of log p over the whole vocabulary at that position (vocab_mean, vocab_var,
-- written into the Min-K% line by the same forward pass); the mean of the lowest
-- max(1, floor(K n)) of the n z-scores (var mink_k, shared with Min-K%). No score for a
-- line with a missing or invalid log-prob, a missing moment or a zero variance.
with lines as (

    {{ prompt_token_lines() }}

),

z_scores as (

    select
        *,
        case when not {{ has_bad_logprob('after_first') }}
            and not coalesce(list_bool_or(list_transform(after_first,
                lambda t: t.vocab_mean is null or t.vocab_var is null or not t.vocab_var > 0)), true)
            then list_sort(list_transform(after_first, lambda t: (t.logprob - t.vocab_mean) / sqrt(t.vocab_var)))
        end as sorted_z
    from lines

),

scores as (

    select
        *,
        list_avg(list_slice(sorted_z, 1, greatest(1, floor(len(sorted_z) * {{ setting('mink_k') }}))))
            as lap_minkpp
    from z_scores

),

{{ prompt_measure_rows('scores', 'lap_minkpp') }}
