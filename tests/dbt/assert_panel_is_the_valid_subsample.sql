-- The panel holds exactly the valid input rows of the study's subsample (all valid rows
-- unless subsample_rows is set), less those excluded because an LLM query was refused
-- for good (int_refused_rows, listed in rejected_rows): every such row once, no other
-- row. A row listed here is in one and not the other (`side` says which).
with observations as (

    select row_id from {{ ref('stg_observations') }}
    where reject_reason is null and in_subsample
    except
    select row_id from {{ ref('int_refused_rows') }}

),

panel as (

    select row_id from {{ ref('panel') }}

),

only_observations as (

    select row_id, 'valid row missing from the panel' as side from observations
    except
    select row_id, 'valid row missing from the panel' from panel

),

only_panel as (

    select row_id, 'panel row that is not a valid row of the subsample' as side from panel
    except
    select row_id, 'panel row that is not a valid row of the subsample' from observations

)

select * from only_observations
union all
select * from only_panel
