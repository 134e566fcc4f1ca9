-- Pre-cutoff panel (target_date <= training_cutoff): validation and detection samples.
-- Ordered by row_id: the paper's pairs bootstrap draws rows by position, so its draws
-- (and p-value) are reproducible from the seed only if the rows come in one order;
-- the panel's window functions return them in an order that varies between builds.
-- Split only after gate_panel passed: a failed gate leaves no regression sample, and the
-- gate's Great Expectations batch and this sort side by side set the build's peak memory.
-- depends_on: {{ ref('gate_panel') }}
select * from {{ ref('panel') }}
where sample = 'pre'
order by row_id
