-- `instance_leakage` as users, the report and the tests query it: the table the Python model
-- instance_leakage_py computes, each column cast to the type its enforced contract declares
-- (_claims__models.yml), so `dbt show --select instance_leakage` previews it (macros/contracts.sql).
{{ contracted_view(ref('instance_leakage_py')) }}
