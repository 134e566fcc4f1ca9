-- Pre-cutoff panel (target_date <= training_cutoff): validation and detection samples.
select * from {{ ref('panel') }}
where sample = 'pre'
