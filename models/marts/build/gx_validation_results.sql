-- Every Great Expectations check of the last build, one row per expectation (the gates
-- raise on failure, so this table exists only when all of them passed).
select * from {{ ref('gate_forecasts') }}
union all by name
select * from {{ ref('gate_recall_pairs') }}
union all by name
select * from {{ ref('gate_mink_scores') }}
union all by name
select * from {{ ref('gate_panel') }}
