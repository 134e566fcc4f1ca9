-- `lap_robustness` as users, the report and the tests query it: the table the Python model
-- lap_robustness_py computes, each column cast to the type its enforced contract declares
-- (_results__models.yml), so `dbt show --select lap_robustness` previews it (macros/contracts.sql).
{{ contracted_view(ref('lap_robustness_py')) }}
