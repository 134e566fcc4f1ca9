-- `claims_repredict` as users, the report and the tests query it: the table the Python model
-- claims_repredict_py computes, each column cast to the type its enforced contract declares
-- (_claims__models.yml), so `dbt show --select claims_repredict` previews it (macros/contracts.sql).
{{ contracted_view(ref('claims_repredict_py')) }}
