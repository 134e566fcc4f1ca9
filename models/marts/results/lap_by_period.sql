-- `lap_by_period` as users, the report and the tests query it: the table the Python model
-- lap_by_period_py computes, each column cast to the type its enforced contract declares
-- (_results__models.yml), so `dbt show --select lap_by_period` previews it (macros/contracts.sql).
{{ contracted_view(ref('lap_by_period_py')) }}
