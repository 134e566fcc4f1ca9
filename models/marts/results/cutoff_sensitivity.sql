-- `cutoff_sensitivity` as users, the report and the tests query it: the table the Python model
-- cutoff_sensitivity_py computes, each column cast to the type its enforced contract declares
-- (_results__models.yml), so `dbt show --select cutoff_sensitivity` previews it (macros/contracts.sql).
{{ contracted_view(ref('cutoff_sensitivity_py')) }}
