-- Min-K% LAP (paper eq. 1) from the prompt-token log-probabilities of each forecast
-- prompt. This SQL is THE implementation that reaches the regressions
-- (lookahead.scoring.mink_lap is its test oracle):
--   1. the first prompt token has no conditional probability and is skipped (whatever
--      the server returned for it); null log-probs after it are dropped;
--   2. the lowest max(1, floor(K n)) of the n remaining log-probs are kept (var mink_k,
--      K=0.2 in the paper);
--   3. geometric (paper eq. 1): exp(mean log-prob); arithmetic (the paper's table notes,
--      "averaging the token probabilities"): mean of the probabilities.
-- A line with a NaN log-prob gets no score (NaN would sort above every number and be
-- silently left out of the lowest K%), and n_invalid_logprobs counts NaN, infinite or
-- positive log-probs after the first token (and missing ones), which gate_mink_scores
-- requires to be 0. Which mean was used is var mink_mean, recorded in study_settings.
-- The raw line is parsed here only, and the prompt tokens are scored where they are
-- parsed: beside Min-K%, each line's score of the other prompt measures that read the
-- tokens (lap_loss, lap_minkpp: their formulas are macros in macros/prompt_measures.sql),
-- and zlib_bytes; their int_lap_* models select them. Why not keep the token lists for
-- those models: at 1,000,000 rows writing them took 43% of this model's time, and each
-- measure's model read them back (BENCHMARKS.md, issue 26).
-- A line is read under the key of the forward pass it holds (macros/study_helpers.sql
-- forward_pass_lines: a line keyed with the extras it carries, as the jobs wrote them
-- before, serves the study), and among one key's lines the one carrying the extras the
-- study needs, then the richer, then the first written (extras_preference).
with source as (

    {{ forward_pass_lines('mink', source('raw', 'mink')) }}

),

tokens as (

    select
        *,
        list_slice(prompt_logprobs, 2, len(prompt_logprobs)) as after_first
    from source

),

scored as (

    select
        *,
        list_transform(after_first, lambda t: t.logprob) as logprobs
    from tokens

),

cleaned as (

    select
        *,
        list_sort(list_filter(logprobs, lambda lp: lp is not null)) as sorted_logprobs,
        coalesce(len(list_filter(logprobs, lambda lp: lp is null or {{ is_invalid_logprob('lp') }})), 0)
            as n_invalid_logprobs,
        coalesce(list_bool_or(list_transform(logprobs, lambda lp: isnan(lp))), false) as has_nan
    from scored

),

lowest as (

    select
        *,
        len(sorted_logprobs) as n_tokens,
        case when not has_nan then
            list_slice(sorted_logprobs, 1, greatest(1, floor(len(sorted_logprobs) * {{ setting('mink_k') }})))
        end as lowest_logprobs
    from cleaned

),

scores as (

    select
        key,
        task,
        row_id,
        model_id,
        backend,
        n_tokens,
        len(lowest_logprobs) as k_tokens,
        exp(list_avg(lowest_logprobs)) as lap_mink_geometric,
        list_avg(list_transform(lowest_logprobs, lambda lp: exp(lp))) as lap_mink_arithmetic,
        n_invalid_logprobs,
        {{ mean_token_logprob('after_first') }} as lap_loss,
        {{ minkpp_score('after_first') }} as lap_minkpp,
        zlib_bytes,
        coalesce(zlib_bytes > 0, false) as has_zlib,
        {{ has_vocab_moments('after_first') }} as has_moments,
        coalesce(clamped_logprobs, 0) as clamped_logprobs,
        entity_id,
        target_date,
        fields_match,
        filename,
        finished_at
    from lowest

)

select
    key,
    task,
    row_id,
    model_id,
    backend,
    n_tokens,
    k_tokens,
    lap_mink_geometric,
    lap_mink_arithmetic,
    lap_mink_{{ setting('mink_mean') }} as lap_mink,
    n_invalid_logprobs,
    lap_loss,
    lap_minkpp,
    zlib_bytes,
    clamped_logprobs,
    fields_match,
    try_cast(finished_at as timestamp) as finished_at
from scores
{{ first_written_line('scores', extras_preference('mink', 'scores')) }}
