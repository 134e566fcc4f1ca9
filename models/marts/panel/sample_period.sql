-- First and last text and target dates per sample, for the report's sample description.
select
    sample,
    min(text_date) as first_text_date,
    max(text_date) as last_text_date,
    min(target_date) as first_target_date,
    max(target_date) as last_target_date
from {{ ref('panel') }}
group by sample
-- pre before post, so the report's table reads the same on every build
order by sample = 'post', sample
