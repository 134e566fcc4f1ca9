-- Rejected input rows by reason, with what each reason means, what to check (seed
-- reject_reasons) and the first few file rows that carry it.
with rejected as (

    select * from {{ ref('rejected_rows') }}

),

reasons as (

    select * from {{ ref('reject_reasons') }}

),

counted as (

    select
        reject_reason,
        count(*) as n_rows,
        array_to_string(list(source_row_number order by source_row_number)[1:5], ', ') as first_source_rows
    from rejected
    group by reject_reason

)

select
    counted.reject_reason,
    counted.n_rows,
    counted.first_source_rows,
    reasons.meaning,
    reasons.what_to_check
from counted
left join reasons on counted.reject_reason = reasons.reason
order by counted.n_rows desc, counted.reject_reason
