-- `regression_results` as users, the report and the tests query it: the table the Python model
-- regression_results_py computes, each column cast to the type its enforced contract declares
-- (_results__models.yml), so `dbt show --select regression_results` previews it (macros/contracts.sql).
{{ contracted_view(ref('regression_results_py')) }}
