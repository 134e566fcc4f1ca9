-- Post-cutoff panel (target_date > training_cutoff): the placebo sample.
select * from {{ ref('panel') }}
where sample = 'post'
