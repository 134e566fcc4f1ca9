-- How often each recall label was missing from the returned top-k tokens (censored),
-- and the residual probability mass, per sample (protocol step 2 sanity checks). Exact
-- label probabilities (setting recall_probabilities) are never censored.
with pairs as (

    select distinct
        panel.sample,
        recall.recall_key,
        recall.up_censored,
        recall.down_censored,
        recall.unknown_censored,
        recall.residual_mass,
        recall.approximated,
        recall.probability_method
    from {{ ref('panel') }} as panel
    inner join {{ ref('int_recall_pairs') }} as recall on panel.recall_key = recall.recall_key

)

select
    sample,
    count(*) as n_pairs,
    avg(case when up_censored then 1.0 else 0.0 end) as share_up_censored,
    avg(case when down_censored then 1.0 else 0.0 end) as share_down_censored,
    avg(case when unknown_censored then 1.0 else 0.0 end) as share_unknown_censored,
    avg(case when up_censored and down_censored then 1.0 else 0.0 end) as share_up_and_down_censored,
    avg(residual_mass) as mean_residual_mass,
    max(residual_mass) as max_residual_mass,
    bool_or(approximated) as approximated,
    -- how the pairs' probabilities were obtained (exact | top_logprobs | sampling, sorted)
    string_agg(distinct probability_method, ', ' order by probability_method) as probability_method
from pairs
group by sample
-- pre before post, so the report's table reads the same on every build
order by sample = 'post', sample
