"""One definition of an input row (lookahead.rows), used by the LLM jobs and by dbt staging.

The unit tests pin the date rule, the reader and each reject reason; the dbt tests run
the job-side loader and the dbt model stg_observations on the same files and require
identical valid rows, row_ids and reasons."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dbt_runner import run_dbt

from lookahead.config import StudyConfigError, default_study_path, load_study, read_study_file
from lookahead.rows import (
    REJECT_REASONS_FILE,
    count_data_rows,
    load_rows,
    parse_dates,
    read_table,
    reject_reasons,
    sniff_delimiter,
    stage_rows,
)
from lookahead.settings_sections import InputSettings

CMAP = {
    "row_id": None,
    "entity_id": "entity_id",
    "entity_name": "entity_name",
    "ticker": "ticker",
    "text": "text",
    "text_date": "text_date",
    "target_date": "target_date",
    "outcome": "outcome",
}

# (entity_id, entity_name, text, text_date, target_date, outcome) -> expected reason (None = valid)
EDGE_ROWS = [
    (("E1", "Firm 1", "plain headline", "2021-03-01", "2021-03-02", "0.5"), None),
    (("  E1 ", "Firm 1", "padded entity id", "2021-03-01", "2021-03-02", "0.1"), None),
    (("E2", "Firm 2", "\t", "2021-03-01", "2021-03-02", "0.1"), "empty text"),
    (("E2", "Firm 2", "\u00a0\u2003\n", "2021-03-01", "2021-03-02", "0.1"), "empty text"),
    (("E2", "Firm 2", "inf outcome", "2021-03-01", "2021-03-02", "inf"), "non-finite outcome"),
    (("E2", "Firm 2", "-Infinity outcome", "2021-03-01", "2021-03-02", "-Infinity"), "non-finite outcome"),
    (("E2", "Firm 2", "nan outcome", "2021-03-01", "2021-03-02", "NaN"), "non-finite outcome"),
    (("E3", "", "empty name", "2021-03-01", "2021-03-02", "0.1"), "missing entity_name"),
    (("E3", " \t", "blank name", "2021-03-01", "2021-03-02", "0.1"), "missing entity_name"),
    (("", "Firm 3", "no entity", "2021-03-01", "2021-03-02", "0.1"), "missing entity_id"),
    (("E4", "Firm 4", "day/month", "10/05/2021", "2021-06-01", "0.1"), "ambiguous text_date"),
    (("E4", "Firm 4", "day/month target", "2021-05-01", "25/05/2021", "0.1"), "ambiguous target_date"),
    (("E5", "Firm 5", "NY evening", "2021-03-04T21:00:00-05:00", "2021-03-05T21:00:00-05:00", "0.2"), None),
    (("E5", "Firm 5", "mixed offsets", "2021-03-04T23:30:00+09:00", "2021-03-05 01:00:00-05:00", "0.2"), None),
    (("E5", "Firm 5", "UTC Z", "2021-03-04T23:59:59Z", "2021-03-05T00:00:00.000Z", "0.2"), None),
    (("E6", "Firm 6", "named month", "5 Oct 2021", "Oct 6, 2021", "0.3"), None),
    (("E6", "Firm 6", "decimal comma", "2021-03-01", "2021-03-02", "1,5"), "non-numeric outcome"),
    (("E6", "Firm 6", "no outcome", "2021-03-01", "2021-03-02", ""), "missing outcome"),
    (("E1", "Firm 1", "plain headline", "2021-03-01", "2021-03-02", "0.50"), "duplicate row"),
    # same entity, date and text with another outcome: a conflict, every row rejected
    (("E9", "Firm 9", "two outcomes", "2021-03-01", "2021-03-02", "0.1"), "conflicting outcome"),
    (("E9", "Firm 9", "two outcomes", "2021-03-01", "2021-03-02", "0.2"), "conflicting outcome"),
    # a runaway text cell (docs/SECURITY.md): rejected with its reason, the bound itself kept
    (("E10", "Firm 10", "x" * 100_001, "2021-03-01", "2021-03-02", "0.1"), "text too long"),
    (("E10", "Firm 10", "y" * 100_000, "2021-03-01", "2021-03-02", "0.1"), None),
    (("E7", "Firm 7", "leap", "2021-02-29", "2021-03-02", "0.1"), "unparseable text_date"),
    (("E7", "Firm 7", "serial", "2021-03-01", "44321", "0.1"), "unparseable target_date"),
    (("E7", "Firm 7", "same day", "2021-03-01", "2021-03-01 23:00", "0.1"), "target_date not after text_date"),
    (("E7", "Firm 7", "no text date", "", "2021-03-02", "0.1"), "missing text_date"),
    (("E7", "Firm 7", "no target date", "2021-03-01", " ", "0.1"), "missing target_date"),
    (("E8", " Firm 8 ", "  spaced text, with; separators  ", "2021-03-01", "2021-03-02", " -0.25 "), None),
]


def _write_semicolon_csv(path, rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, delimiter=";")
        w.writerow(["entity_id", "entity_name", "ticker", "text", "text_date", "target_date", "outcome"])
        for e, name, text, d1, d2, y in rows:
            w.writerow([e, name, "T", text, d1, d2, y])


def _ny_parquet(path, n: int = 200) -> None:
    """tz-aware New York timestamps at 21:00 (the case that lost 170 of 200 rows)."""
    ny = "America/New_York"
    text_ts = pd.date_range("2021-01-04 21:00", periods=n, freq="D", tz=ny)
    table = pa.table(
        {
            "entity_id": pa.array([i % 7 for i in range(n)], pa.int64()),
            "entity_name": [f"Firm {i % 7}" for i in range(n)],
            "ticker": [f"F{i % 7}" for i in range(n)],
            "text": [f"headline {i}" for i in range(n)],
            "text_date": pa.array(text_ts, pa.timestamp("us", tz=ny)),
            "target_date": pa.array(text_ts + pd.Timedelta(days=1), pa.timestamp("us", tz=ny)),
            "outcome": pa.array([0.01 * i - 1 for i in range(n)], pa.float64()),
            "small": pa.array([i % 2 for i in range(n)], pa.int8()),
        }
    )
    pq.write_table(table, path)


# ----------------------------------------------------------------------------- unit


def test_reject_reasons_come_from_the_seed():
    with open(REJECT_REASONS_FILE, newline="") as fh:
        seed = [r["reason"] for r in csv.DictReader(fh)]
    assert list(reject_reasons()) == seed
    assert {reason for _, reason in EDGE_ROWS if reason} == set(seed)  # every reason exercised


@pytest.mark.parametrize(
    "cell, tz, expected, status",
    [
        ("2021-03-04", None, "2021-03-04", None),
        ("2021-03-04T21:00:00-05:00", None, "2021-03-04", None),  # calendar date as written
        ("2021-03-04T21:00:00-05:00", "UTC", "2021-03-05", None),  # ... unless a zone is named
        ("2021-03-04T23:30:00+09:00", "America/New_York", "2021-03-04", None),
        ("2021-03-05 01:00:00-0500", "Asia/Tokyo", "2021-03-05", None),
        ("2021-03-04 21:00", "UTC", "2021-03-04", None),  # no offset: taken as in the zone
        ("2021/3/4", None, "2021-03-04", None),
        ("5 Oct 2021", None, "2021-10-05", None),
        ("05-Oct-2021", None, "2021-10-05", None),
        ("10/05/2021", None, None, "ambiguous"),
        ("25.05.2021", None, None, "ambiguous"),
        ("44321", None, None, "unparseable"),
        ("2021-13-01", None, None, "unparseable"),
        ("2021-03-04T24:00", None, None, "unparseable"),
        ("  ", None, None, "missing"),
    ],
)
def test_one_date_rule(cell, tz, expected, status):
    dates, st = parse_dates(pd.Series([cell], dtype=object), timezone=tz)
    got = None if pd.isna(dates.iloc[0]) else dates.iloc[0].strftime("%Y-%m-%d")
    assert got == expected
    assert (None if pd.isna(st.iloc[0]) else st.iloc[0]) == status


def test_date_format_resolves_day_month_order():
    cells = pd.Series(["10/05/2021", "2021-05-11", "31/12/2021"], dtype=object)
    dates, _ = parse_dates(cells, date_format="%d/%m/%Y")
    assert list(dates.dt.strftime("%Y-%m-%d")) == ["2021-05-10", "2021-05-11", "2021-12-31"]
    dates, _ = parse_dates(cells[:1], date_format="%m/%d/%Y")
    assert dates.iloc[0].strftime("%Y-%m-%d") == "2021-10-05"


def test_bad_timezone_setting_names_it():
    with pytest.raises(StudyConfigError, match="setting 'date_timezone': 'Mars/Olympus'"):
        parse_dates(pd.Series(["2021-01-01"], dtype=object), timezone="Mars/Olympus")


@pytest.mark.parametrize(
    "header, expected",
    [
        ("a,b,c\n", ","),
        ("a;b;c\n", ";"),
        ("a\tb\tc\n", "\t"),
        ("a|b|c\n", "|"),
        ('"x;y",b,c\n', ","),
        ("single\n", ","),
    ],
)
def test_sniff_delimiter(header, expected):
    assert sniff_delimiter(header) == expected


def test_stage_rows_reasons_and_row_ids():
    df = pd.DataFrame(
        [r for r, _ in EDGE_ROWS], columns=["entity_id", "entity_name", "text", "text_date", "target_date", "outcome"]
    )
    df = df.where(df != "", None)
    staged = stage_rows(df, InputSettings.with_defaults(column_map={**CMAP, "ticker": None}))
    assert [None if pd.isna(r) else r for r in staged["reject_reason"]] == [e for _, e in EDGE_ROWS]
    padded = staged.iloc[1]
    assert padded["entity_id"] == "E1"  # stripped for the recall key and the panel
    expect = hashlib.sha256(b"E1|2021-03-01|padded entity id").hexdigest()[:16]
    assert padded["row_id"] == expect  # hashed from the validated id: a re-saved file keeps its ids
    ny = staged.iloc[12]
    assert (ny["text_date"].date(), ny["target_date"].date()) == (dt.date(2021, 3, 4), dt.date(2021, 3, 5))
    assert staged["in_subsample"].sum() == staged["reject_reason"].isna().sum()


def test_row_ids_given_for_some_rows_are_kept_and_the_others_derived():
    """Only rows without a given id are hashed; the derived ids are those of a file with
    no id column at all (sha256 of entity_id|text_date|text, the entity id as validated)."""
    df = pd.DataFrame(
        {
            "id": ["given-1", None, " given-3 ", "  "],
            "entity_id": ["E1", " E2", "E3", "E4"],
            "entity_name": ["F"] * 4,
            "text": ["a", "b", "c", "d"],
            "text_date": ["2021-03-01", "2021-03-02T09:00:00", "2021-03-03", "2021-03-04"],
            "target_date": ["2021-03-05"] * 4,
            "outcome": ["0.1"] * 4,
        }
    )
    staged = stage_rows(df, InputSettings.with_defaults(column_map={**CMAP, "row_id": "id", "ticker": None}))
    b = hashlib.sha256(b"E2|2021-03-02|b").hexdigest()[:16]
    d = hashlib.sha256(b"E4|2021-03-04|d").hexdigest()[:16]
    assert staged["row_id"].tolist() == ["given-1", b, "given-3", d]
    assert staged["row_id_derived"].tolist() == [False, True, False, True]
    no_ids = stage_rows(df.drop(columns="id"), InputSettings.with_defaults(column_map={**CMAP, "ticker": None}))
    assert no_ids["row_id"].tolist()[1::2] == [b, d]


def test_subsample_setting_is_order_free(tmp_path):
    df = pd.DataFrame(
        {
            "entity_id": [f"E{i}" for i in range(50)],
            "entity_name": "F",
            "text": "t",
            "text_date": "2021-01-01",
            "target_date": "2021-01-02",
            "outcome": "1",
        }
    )
    settings = InputSettings.with_defaults(column_map={**CMAP, "ticker": None}, subsample_rows=9, subsample_seed=4)
    a = stage_rows(df, settings)
    b = stage_rows(df.iloc[::-1].reset_index(drop=True), settings)
    assert a["in_subsample"].sum() == 9
    assert set(a.loc[a["in_subsample"], "row_id"]) == set(b.loc[b["in_subsample"], "row_id"])
    with pytest.raises(StudyConfigError, match="setting 'subsample_rows'"):
        stage_rows(df, replace(settings, subsample_rows=0))


def test_reader_errors_are_one_line(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(StudyConfigError, match=r"setting 'data_path': file .*empty.csv' is empty \(0 bytes\)"):
        read_table(empty)
    odd = tmp_path / "obs.xlsx"
    odd.write_text("x")
    with pytest.raises(StudyConfigError, match="must be a .csv, .tsv or .parquet file"):
        read_table(odd)
    one = tmp_path / "one.csv"
    one.write_text("a\n1\n")
    with pytest.raises(StudyConfigError, match="setting 'csv_delimiter': ';;' is not one of"):
        read_table(one, ";;")
    assert read_table(one, "tab").shape == (1, 1)


def test_header_only_file_stops_the_jobs_with_one_line(tmp_path):
    path = tmp_path / "obs.csv"
    path.write_text("entity_id,entity_name,ticker,text,text_date,target_date,outcome\n")
    study = load_study(overrides={"data_path": str(path), "column_map": CMAP})
    with pytest.raises(StudyConfigError, match="has a header but no data rows"):
        load_rows(study)


def test_forced_delimiter_and_upper_case_suffix(tmp_path):
    path = tmp_path / "OBS.CSV"
    _write_semicolon_csv(path, [r for r, _ in EDGE_ROWS[:2]])
    assert read_table(path).shape == (2, 7)  # sniffed
    assert read_table(path, ";").shape == (2, 7)
    assert read_table(path, ",").shape == (2, 1)  # forced wrong: one column, not a crash


# ----------------------------------------------------------------------------- jobs vs dbt


def _dbt_stage(tmp_path, vars_):
    raw = tmp_path / "raw"
    raw.mkdir()
    for task in ("forecast", "recall", "mink"):
        (raw / f"{task}.jsonl").write_text("")
    vars_["raw_dir"] = str(raw)
    study = {**read_study_file(default_study_path()), **vars_}  # the demo's text, this data
    res = run_dbt(["run", "--select", "+stg_observations"], study, tmp_path / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    types = dict(res.table("(describe stg_observations)")[["column_name", "column_type"]].values)
    assert (types["text_date"], types["target_date"], types["outcome"]) == ("DATE", "DATE", "DOUBLE")
    return res.table("stg_observations").sort_values("source_row_number").reset_index(drop=True)


def _assert_same_rows(dbt_rows: pd.DataFrame, study) -> pd.DataFrame:
    valid, rejects = load_rows(study)
    dbt_valid = dbt_rows[dbt_rows["reject_reason"].isna() & dbt_rows["in_subsample"]]
    assert list(dbt_valid["row_id"]) == list(valid["row_id"])
    assert list(dbt_valid["entity_id"]) == list(valid["entity_id"])
    assert list(dbt_valid["text"]) == list(valid["text"])
    assert list(dbt_valid["text_date"].dt.strftime("%Y-%m-%d")) == list(valid["text_date"])
    assert list(dbt_valid["target_date"].dt.strftime("%Y-%m-%d")) == list(valid["target_date"])
    assert list(dbt_valid["outcome"]) == list(valid["outcome"])
    dbt_rej = dbt_rows[dbt_rows["reject_reason"].notna()]
    assert list(dbt_rej["reject_reason"]) == list(rejects["reject_reason"])
    return valid


def test_jobs_and_staging_agree_on_a_semicolon_csv_of_edge_cases(tmp_path):
    path = tmp_path / "OBS.CSV"
    _write_semicolon_csv(path, [r for r, _ in EDGE_ROWS])
    vars_ = {"data_path": str(path), "column_map": CMAP}
    staged = _dbt_stage(tmp_path, vars_)
    assert [None if pd.isna(r) else r for r in staged["reject_reason"]] == [e for _, e in EDGE_ROWS]
    valid = _assert_same_rows(staged, load_study(overrides=vars_))
    assert len(valid) == sum(1 for _, e in EDGE_ROWS if e is None)


def test_jobs_and_staging_agree_on_new_york_parquet_and_subsample(tmp_path):
    path = tmp_path / "OBS.PARQUET"
    _ny_parquet(path)
    vars_ = {"data_path": str(path), "column_map": CMAP, "extra_columns": ["small"], "subsample_rows": 37, "subsample_seed": 5}
    staged = _dbt_stage(tmp_path, vars_)
    assert staged["reject_reason"].isna().all()  # no evening row dropped
    assert staged["in_subsample"].sum() == 37
    assert staged["text_date"].iloc[0].date() == dt.date(2021, 1, 4)  # 21:00 New York stays 4 January
    assert staged["entity_id"].iloc[3] == "3" and staged["small"].iloc[1] == "1"
    valid = _assert_same_rows(staged, load_study(overrides=vars_))
    assert len(valid) == 37


@pytest.mark.parametrize(
    "content, message",
    [
        ("", r"error: setting 'data_path': file '.*obs.csv' is empty \(0 bytes\)"),
        (
            "entity_id,entity_name,ticker,text,text_date,target_date,outcome\n",
            r"error: setting 'data_path': '.*obs.csv' has a header but no data rows",
        ),
        (
            "entity_id,entity_name,ticker,text,text_date,target_date,outcome\nE1,F,T,x,10/05/2021,2021-06-01,1\n",
            r"stopped: no valid rows in .*obs.csv \(1 rejected: 1 ambiguous text_date\)",
        ),
    ],
)
def test_jobs_stop_on_bad_input_with_one_line(tmp_path, content, message):
    """The real job entry point, before any model is loaded: one line, no traceback."""
    import re
    import subprocess
    import sys

    import yaml
    from dbt_runner import ROOT

    (tmp_path / "obs.csv").write_text(content)
    study = tmp_path / "study.yml"
    study.write_text(
        yaml.safe_dump(
            {
                **read_study_file(default_study_path()),  # the demo's text
                "data_path": str(tmp_path / "obs.csv"),
                "column_map": CMAP,
                "raw_dir": str(tmp_path / "raw"),
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert re.search(message, proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_count_data_rows_counts_rows_without_parsing_never_fewer(tmp_path: Path) -> None:
    csv_file = tmp_path / "rows.csv"
    csv_file.write_text("a,b\n1,2\n3,4\n", encoding="utf-8")
    assert count_data_rows(csv_file) == 2
    csv_file.write_text("a,b\n1,2\n3,4", encoding="utf-8")  # no line break after the last row
    assert count_data_rows(csv_file) == 2
    csv_file.write_text('a,b\n1,"two\nlines"\n', encoding="utf-8")  # a quoted line break: one more
    assert count_data_rows(csv_file) == 2
    csv_file.write_text("a,b\n", encoding="utf-8")
    assert count_data_rows(csv_file) == 0
    csv_file.write_text("", encoding="utf-8")
    assert count_data_rows(csv_file) == 0
    assert count_data_rows(tmp_path / "missing.csv") == 0
    pq.write_table(pa.table({"a": list(range(7))}), tmp_path / "rows.parquet")
    assert count_data_rows(tmp_path / "rows.parquet") == 7
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert count_data_rows(tmp_path / "bad.parquet") == 0


# ----------------------------------------------------------------------------- chunked scan


def _whole_file(settings: InputSettings, path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The reference: every row staged at once (what dbt's stg_observations stores)."""
    from lookahead.rows import split_staged, stage_observations

    return split_staged(stage_observations(settings, path))


def _shuffled_edges(n_copies: int = 3) -> list[tuple[str, ...]]:
    """EDGE_ROWS a few times over, shuffled with a fixed seed: a duplicate or a conflict
    lands in another chunk than the row it repeats."""
    import random

    rows = [r for r, _ in EDGE_ROWS] * n_copies
    rows += [("E11", "Firm 11", f"unique {i}", "2021-04-01", f"2021-0{5 + i % 3}-02", str(i)) for i in range(40)]
    random.Random(7).shuffle(rows)
    return rows


@pytest.mark.parametrize("chunk_rows", [5, 16, 10_000])
@pytest.mark.parametrize("subsample", [None, 11])
def test_chunked_scan_stages_every_row_as_the_whole_file_does(tmp_path, chunk_rows, subsample):
    """Reasons decided across rows (a duplicate or a conflict in another chunk, the seeded
    subsample) and the rows the jobs query are those of staging the whole file at once."""
    from lookahead.rows import RowFacts, scan_rows

    path = tmp_path / "obs.csv"
    _write_semicolon_csv(path, _shuffled_edges())
    settings = InputSettings.with_defaults(column_map=CMAP, subsample_rows=subsample, subsample_seed=3)
    rows, rejects = _whole_file(settings, path)
    scan = scan_rows(settings, path, chunk_rows)
    assert scan.chunk_sizes == [min(chunk_rows, scan.n - i) for i in range(0, scan.n, chunk_rows)]
    assert sum(r == "duplicate row" for r in rejects["reject_reason"]) >= 2  # the case is exercised
    if subsample is None and chunk_rows < scan.n:  # ... across chunks: a duplicate of a row in an earlier chunk
        first_at = dict(zip(rows["row_id"], rows["source_row_number"], strict=False))
        dups = rejects[rejects["reject_reason"] == "duplicate row"]
        assert any(
            (first_at[r] - 1) // chunk_rows < (n - 1) // chunk_rows
            for r, n in zip(dups["row_id"], dups["source_row_number"], strict=False)
            if r in first_at
        )
    got_rows, got_rejects = (pd.concat(parts, ignore_index=True) for parts in zip(*scan.chunks(), strict=False))
    pd.testing.assert_frame_equal(got_rows.astype(object), rows.astype(object))
    pd.testing.assert_frame_equal(got_rejects.astype(object), rejects.astype(object))
    assert scan.reject_counts().to_dict() == rejects["reject_reason"].value_counts().to_dict()
    assert scan.facts("2021-06-01") == RowFacts.of(rows, "2021-06-01")
    assert sorted(scan.queried_entities()) == sorted(rows["entity_id"].unique())


def test_chunked_scan_names_a_repeated_row_id_across_chunks(tmp_path):
    """A row_id column that repeats a value in another chunk: the same one line as the
    whole file gives (the first repeated value, its count and rows)."""
    from lookahead.rows import scan_rows

    path = tmp_path / "obs.csv"
    ids = ["a", "b", "c", "d", "b", "e", "a", "b"]
    path.write_text(
        "id,entity_id,entity_name,text,text_date,target_date,outcome\n"
        + "".join(f"{i},E1,Firm,text {n},2021-03-01,2021-03-02,0.1\n" for n, i in enumerate(ids)),
        encoding="utf-8",
    )
    settings = InputSettings.with_defaults(column_map={**CMAP, "row_id": "id", "ticker": None})
    with pytest.raises(StudyConfigError) as whole:
        _whole_file(settings, path)
    with pytest.raises(StudyConfigError) as chunked:
        scan_rows(settings, path, 3)
    assert str(chunked.value) == str(whole.value)
    assert "value 'a' appears 2 times (data rows 1, 7)" in str(chunked.value)


def test_chunked_parquet_and_a_header_only_file(tmp_path):
    from lookahead.rows import scan_rows

    path = tmp_path / "obs.parquet"
    _ny_parquet(path, 50)
    settings = InputSettings.with_defaults(column_map=CMAP, extra_columns=["small"])
    rows, _ = _whole_file(settings, path)
    got = pd.concat([r for r, _ in scan_rows(settings, path, 7).chunks()], ignore_index=True)
    pd.testing.assert_frame_equal(got.astype(object), rows.astype(object))
    empty = tmp_path / "empty.csv"
    empty.write_text("entity_id,entity_name,ticker,text,text_date,target_date,outcome\n")
    assert scan_rows(settings.with_defaults(column_map=CMAP), empty, 7).n == 0


def test_a_file_edited_between_the_two_passes_stops_with_one_line(tmp_path):
    """The second pass stages the file again: a file that lost or gained rows since the
    first pass (an edit while the job reads it) stops with one line naming it, never a
    reason or a subsample mask laid on other rows."""
    from lookahead.rows import scan_rows

    path = tmp_path / "obs.csv"
    rows = _shuffled_edges(1)
    settings = InputSettings.with_defaults(column_map=CMAP)
    for edit in (rows[:-7], rows + rows[:7]):  # rows removed, rows added
        _write_semicolon_csv(path, rows)
        scan = scan_rows(settings, path, 16)
        _write_semicolon_csv(path, edit)
        with pytest.raises(StudyConfigError, match=r"setting 'data_path': '.*obs.csv' changed while it was read"):
            list(scan.chunks())
