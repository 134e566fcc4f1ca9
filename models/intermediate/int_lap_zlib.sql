-- zlib LAP (lookahead/measures.py 'zlib', Carlini et al. 2021): the mean log-prob of the
-- prompt tokens after the first divided by the zlib-compressed byte length of the
-- prompt text (zlib_bytes, written into the Min-K% line by the job), i.e. minus
-- Carlini's loss-to-zlib ratio, so that higher = more likely seen. No score for a line
-- with a missing or invalid log-prob or without zlib_bytes.
with lines as (

    select * from {{ ref('stg_mink_scores') }}

),

scores as (

    select
        *,
        case when zlib_bytes > 0 then lap_loss / zlib_bytes end as lap_zlib
    from lines

),

{{ prompt_measure_rows('scores', 'lap_zlib') }}
