-- `claims_summary` as users, the report and the tests query it: the table the Python model
-- claims_summary_py computes, each column cast to the type its enforced contract declares
-- (_claims__models.yml), so `dbt show --select claims_summary` previews it (macros/contracts.sql).
{{ contracted_view(ref('claims_summary_py')) }}
