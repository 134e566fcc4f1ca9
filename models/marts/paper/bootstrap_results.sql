-- `bootstrap_results` as users, the report and the tests query it: the table the Python model
-- bootstrap_results_py computes, each column cast to the type its enforced contract declares
-- (_paper__models.yml), so `dbt show --select bootstrap_results` previews it (macros/contracts.sql).
{{ contracted_view(ref('bootstrap_results_py')) }}
