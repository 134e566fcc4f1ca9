"""Every input row mapped to the protocol's columns and validated, by the same package
function the LLM jobs use (lookahead.rows.stage_observations), so jobs and staging agree
on every valid row and row_id. Nothing is dropped: a failing row carries its
reject_reason (seeds/reject_reasons.csv) and reaches `rejected_rows`."""


def model(dbt, session):
    dbt.config(materialized="table")
    import contextlib

    import pyarrow as pa

    from lookahead.rows import stage_observations
    from lookahead.stats.protocol import study_from_frame

    dbt.source("study", "observations")  # lineage: the file this model reads
    with contextlib.suppress(
        Exception
    ):  # lineage: the reasons a row can carry (the package reads seeds/reject_reasons.csv itself)
        dbt.ref("reject_reasons")
    settings = dbt.ref("study_settings").df()
    study = study_from_frame(settings)
    staged = stage_observations(study.input, study.resolve(study.input.data_path))
    for col in ("text_date", "target_date"):  # DATE columns (midnight datetimes -> days)
        staged[col] = staged[col].to_numpy().astype("datetime64[D]")
    fixed = {
        "source_row_number": pa.int64(),
        "row_id": pa.string(),
        "row_id_derived": pa.bool_(),
        "entity_id": pa.string(),
        "entity_name": pa.string(),
        "ticker": pa.string(),
        "text": pa.string(),
        "text_date_raw": pa.string(),
        "target_date_raw": pa.string(),
        "outcome_raw": pa.string(),
        "text_date": pa.date32(),
        "target_date": pa.date32(),
        "outcome": pa.float64(),
        "reject_reason": pa.string(),
        "in_subsample": pa.bool_(),
    }
    schema = pa.schema([(c, fixed.get(c, pa.string())) for c in staged.columns])
    return pa.Table.from_pandas(staged, schema=schema, preserve_index=False)
