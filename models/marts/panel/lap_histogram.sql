-- Histogram counts of the selected LAP measure in ten bins of width 0.1 on [0, 1],
-- pre vs post cutoff (protocol step 2).
with bins as (

    select range as bin from range(10)

),

samples as (

    select distinct sample from {{ ref('panel') }}

),

binned as (

    select
        sample,
        least(cast(floor(lap * 10) as integer), 9) as bin
    from {{ ref('panel') }}
    where lap is not null

)

select
    samples.sample,
    bins.bin,
    bins.bin / 10.0 as bin_lower,
    (bins.bin + 1) / 10.0 as bin_upper,
    count(binned.bin) as n
from samples
cross join bins
left join binned on samples.sample = binned.sample and bins.bin = binned.bin
group by samples.sample, bins.bin
