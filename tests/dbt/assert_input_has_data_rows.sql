-- Fails when the input file (setting data_path) has a header but no data rows: there is
-- nothing to test, so the build stops here instead of reporting on an empty panel.
-- What to check: the file at data_path, and that it is the file you meant.
with observations as (

    select * from {{ ref('stg_observations') }}

),

counted as (

    select count(*) as n_rows from observations

)

select
    n_rows,
    'setting data_path: ' || {{ sql_string(setting_path('data_path')) }} || ' has a header but no data rows' as problem
from counted
where n_rows = 0
