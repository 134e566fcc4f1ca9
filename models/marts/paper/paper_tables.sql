-- `paper_tables` as users, the report and the tests query it: the table the Python model
-- paper_tables_py computes, each column cast to the type its enforced contract declares
-- (_paper__models.yml), so `dbt show --select paper_tables` previews it (macros/contracts.sql).
{{ contracted_view(ref('paper_tables_py')) }}
