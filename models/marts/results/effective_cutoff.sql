-- `effective_cutoff` as users, the report and the tests query it: the table the Python model
-- effective_cutoff_py computes, each column cast to the type its enforced contract declares
-- (_results__models.yml), so `dbt show --select effective_cutoff` previews it (macros/contracts.sql).
{{ contracted_view(ref('effective_cutoff_py')) }}
