-- `verdict` as users, the report and the tests query it: the table the Python model
-- verdict_py computes, each column cast to the type its enforced contract declares
-- (_results__models.yml), so `dbt show --select verdict` previews it (macros/contracts.sql).
{{ contracted_view(ref('verdict_py')) }}
