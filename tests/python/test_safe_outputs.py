"""Outputs safe to open: no spreadsheet formula and no control byte from data in any file
the report writes (lookahead.safe_output; docs/SECURITY.md, "Outputs safe to open").

The attack: rejected_rows.csv held `=HYPERLINK("http://evil.example","x")`, `@SUM(1+1)`,
`-2+3+cmd|' /C calc'!A0` and a raw NUL; study_settings.csv a formula from
`outcome_description`; the .dta panels 68 ANSI escape bytes from an entity name. Here the
tables are planted in a DuckDB database and written by the report's own writers
(export_tables, export_stata_panels, the LaTeX and page renderers), then read back as a
spreadsheet, Stata and LaTeX would read them."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from lookahead.pages import html as page_html
from lookahead.pages.assets import gt_table
from lookahead.pages.blocks import Para, Section, Table
from lookahead.pages.markdown import render as render_markdown
from lookahead.pages.report import export_tables
from lookahead.paper.render import latex_escape
from lookahead.safe_output import FORMULA_START, safe_frame, spreadsheet_cell, strip_controls
from lookahead.stats.stata import export_stata_panels

FORMULAS = [
    '=HYPERLINK("http://evil.example","x")',
    "@SUM(1+1)",
    "-2+3+cmd|' /C calc'!A0",
    "+1+1",
    "\t=1+1",
    "\r=1+1",
    "=1+1\x00",
]
ANSI = "\x1b[31mACME\x1b[0m\x00\x07\u202eevil"
CONTROL_BYTES = [b"\x00", b"\x1b", b"\x07", "\u202e".encode()]


def _plant(db: Path) -> None:
    con = duckdb.connect(str(db))
    try:
        con.execute("create table panel_pre as select 'r1' as row_id, 1.0 as outcome")
        con.execute(
            "create table regression_results as select 'detection' as spec, 'pre' as sample, 'mu_hat' as term, -2.5 as estimate"
        )
        con.execute("create table verdict as select 'No evidence' as verdict, -0.25 as beta3")
        rows = pd.DataFrame(
            {
                "source_row_number": range(len(FORMULAS) + 3),
                "entity_id": [*FORMULAS, ANSI, "-2.5", "-1e-05"],
                "raw_outcome": ["-2.5", "=2+5", "@x", "+7", "-inf", "ok", "", "-"] + [""] * 2,
                "reason": "outcome is not a number",
            }
        )
        con.register("rows_df", rows)
        con.execute("create table rejected_rows as select * from rows_df")
        con.execute(
            "create table study_settings as select 'demo' as study_name, "
            '\'=HYPERLINK("http://evil.example","x")\' as outcome_description, -3 as mink_k, '
            '\'{"outcome_description": "=1+1"}\' as settings_json'
        )
    finally:
        con.close()


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    db = tmp_path / "study.duckdb"
    _plant(db)
    out = tmp_path / "results"
    con = duckdb.connect(str(db), read_only=True)
    try:
        export_tables(con, out)
    finally:
        con.close()
    return out


def _cells(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_report_csvs_hold_no_formula_and_no_control_byte(exported: Path) -> None:
    files = sorted(exported.glob("*.csv"))
    assert {p.name for p in files} >= {"rejected_rows.csv", "study_settings.csv"}
    for path in files:
        data = path.read_bytes()
        assert not any(b in data for b in CONTROL_BYTES), path.name
        for row in _cells(path):
            for cell in row:
                assert not cell.startswith(FORMULA_START) or _is_number(cell), (path.name, cell)
    rejected = pd.read_csv(exported / "rejected_rows.csv", dtype=str, keep_default_na=False)
    assert rejected["entity_id"].tolist()[:3] == ["'" + f for f in FORMULAS[:3]]
    assert rejected["entity_id"].iloc[len(FORMULAS)] == "[31mACME[0mevil"  # the bytes gone, the text kept
    # numbers written as text stay numbers, and so do number columns
    assert rejected["entity_id"].tolist()[-2:] == ["-2.5", "-1e-05"]
    assert rejected["raw_outcome"].tolist()[:5] == ["-2.5", "'=2+5", "'@x", "+7", "-inf"]
    settings = pd.read_csv(exported / "study_settings.csv", dtype=str)
    assert settings["outcome_description"].iloc[0].startswith("'=HYPERLINK")
    assert settings["mink_k"].iloc[0] == "-3"
    assert pd.read_csv(exported / "regression_detection_pre.csv")["estimate"].iloc[0] == -2.5
    assert pd.read_csv(exported / "verdict.csv")["beta3"].iloc[0] == -0.25


def test_stata_panels_carry_no_control_byte(tmp_path: Path) -> None:
    panel = pd.DataFrame(
        {
            "row_id": ["r1\x1b[2J", "r2"],
            "entity_id": [ANSI, "=1+1"],
            "text_date": ["2021-01-04", "2021-01-05"],
            "target_date": ["2021-01-05", "2021-01-06"],
            "outcome": [1.0, -2.5],
            "mu_hat": [1.0, -1.0],
            "lap": [0.5, 0.2],
        }
    )
    written = export_stata_panels(panel, None, tmp_path)
    assert written
    data = written[0].read_bytes()
    # (a .dta file is binary: its header and numbers hold any byte; the strings must not)
    assert b"\x1b[" not in data and b"ACME\x00" not in data and "\u202e".encode() not in data
    back = pd.read_stata(written[0])
    assert back["entity_id"].tolist() == ["[31mACME[0mevil", "=1+1"]
    assert back["row_id"].tolist() == ["r1[2J", "r2"]
    assert back["outcome"].tolist() == [1.0, -2.5]


def test_latex_tables_carry_no_control_byte_and_no_blank_line() -> None:
    frame = pd.DataFrame({"term": [ANSI, "a\n\nb", "\\input{/etc/passwd}"], "estimate": ["-2.5", "0.1", "1"]})
    tex = gt_table(Table(frame, "detection", caption="Title\x1b[0m\n\nnext", publication=True)).as_latex()
    assert not any(ch in tex for ch in ("\x00", "\x1b", "\x07", "\u202e"))
    assert "\n\n\n" not in tex.split(r"\midrule", 1)[1] and "a b" in tex
    assert r"\input{" not in tex
    esc = latex_escape("x\x00\x1b[1m\n\n50% & y")
    assert esc == r"x[1m 50\% \& y"


def test_report_pages_carry_no_control_byte() -> None:
    sec = Section(
        "answer", "Study\x1b[2J", "lead\x00", [Para(f"entity {ANSI}"), Table(pd.DataFrame({"e": [ANSI]}), "t")], level=1
    )
    md = render_markdown([sec])
    page = page_html.render([sec], "title\x1b]0;owned\x07")
    for text in (md, page.split('<script type="module">', 1)[0]):
        assert not any(ch in text for ch in ("\x00", "\x1b", "\x07", "\u202e")), text[:200]


@pytest.mark.parametrize(
    "value,expected",
    [
        ("=1+1", "'=1+1"),
        ("+1+1", "'+1+1"),
        ("-1+1", "'-1+1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\n=1"),
        ("a\r\nb\rc", "a\nb\nc"),
        ("-2.5", "-2.5"),
        ("+3", "+3"),
        ("-1e-05", "-1e-05"),
        ("-inf", "-inf"),
        ("-", "'-"),
        ("plain", "plain"),
        ("a=b", "a=b"),
        ("", ""),
        ("=\x00HYPERLINK", "'=HYPERLINK"),
        (-2.5, -2.5),
        (None, None),
    ],
)
def test_spreadsheet_cell_rule(value, expected) -> None:
    assert spreadsheet_cell(value) == expected


def test_safe_frame_touches_only_text_columns() -> None:
    df = pd.DataFrame(
        {"n": [-1.5, 2.0], "s": ["=x", "-3"], "b": [True, False], "d": pd.to_datetime(["2021-01-01", "2021-02-01"])}
    )
    out = safe_frame(df)
    assert out["n"].tolist() == [-1.5, 2.0] and out["b"].tolist() == [True, False]
    assert out["s"].tolist() == ["'=x", "-3"] and out["d"].equals(df["d"])
    assert strip_controls("tab\tline\nend\r") == "tab\tline\nend\r"


# ------------------------------------------------------------------ through a real build

HOSTILE_ROWS = ['=HYPERLINK("http://evil.example","x")', "@SUM(1+1)", "-2+3+cmd|' /C calc'!A0", "a\x00b", "\x1b[31mred\x1b[0m"]


def test_a_built_study_reports_no_formula_and_no_control_byte(tmp_path: Path) -> None:
    """The attack through `dbt build` and the report: rejected input rows holding formulas,
    a NUL and an ANSI escape; a formula as the study's outcome wording."""
    from dbt_runner import run_dbt
    from fixture_study import write_fixture_study

    from lookahead.config import Study, resolve
    from lookahead.pages.report import write_report

    study = write_fixture_study(tmp_path / "study")
    obs = pd.read_csv(study.data_path, dtype=str)
    bad = obs.head(len(HOSTILE_ROWS)).copy()
    bad["row_id"] = [f"bad{i}" for i in range(len(bad))]
    bad["outcome"] = HOSTILE_ROWS  # not a number: each row is rejected, whole, into rejected_rows
    bad["entity_name"] = HOSTILE_ROWS
    pd.concat([obs, bad]).to_csv(study.data_path, index=False)
    vars_ = {
        **study.vars,
        "outcome_description": '=HYPERLINK("http://evil.example","x")',
        "results_dir": str(tmp_path / "results"),
        "outputs_dir": str(tmp_path / "outputs"),
    }
    res = run_dbt(["build"], vars_, tmp_path / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    files = write_report(Study(vars=resolve(vars_)), database=tmp_path / "db.duckdb")
    rejected = files.report.parent / "rejected_rows.csv"
    assert rejected in files.csvs
    text = rejected.read_text(encoding="utf-8")
    assert "'=HYPERLINK" in text and "'@SUM(1+1)" in text and "'-2+3+cmd" in text
    for path in files.csvs:
        data = path.read_bytes()
        assert not any(b in data for b in CONTROL_BYTES), path.name
        for row in _cells(path):
            for cell in row:
                assert not cell.startswith(FORMULA_START) or _is_number(cell), (path.name, cell)
    settings = pd.read_csv(files.report.parent / "study_settings.csv", dtype=str)
    assert settings["outcome_description"].iloc[0].startswith("'=HYPERLINK")
    for path in [*files.stata, files.report, files.page, *files.report.parent.glob("tables/*.tex")]:
        assert b"\x1b[" not in path.read_bytes() and b"a\x00b" not in path.read_bytes(), path


def test_safe_frame_on_object_columns_mixed_and_wide() -> None:
    """An object column of strings and one mixing numbers, None and non-ASCII text: the
    vectorised test finds the same cells as the rule applied one by one."""
    cells = ["=x", None, "-2.5", "a\x00", "\u202eé", "é", "\r=1", "ok\x85", "Fïrm"]
    mixed = pd.Series([*cells, 1.5, -3], dtype=object)
    for col in (pd.Series(cells, dtype=object), mixed, pd.Series(cells, dtype="str")):
        got = safe_frame(pd.DataFrame({"c": col}))["c"].tolist()
        want = [spreadsheet_cell(v) if isinstance(v, str) else v for v in col.tolist()]
        assert [None if pd.isna(v) else v for v in got] == [None if pd.isna(v) else v for v in want]
    assert safe_frame(pd.DataFrame({"c": pd.Series(cells, dtype=object)}), formulas=False)["c"].tolist()[:4] == [
        "=x",
        None,
        "-2.5",
        "a",
    ]
