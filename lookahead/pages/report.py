"""`lookahead report`: results/<study>/REPORT.md, index.html and their CSVs, read from the
tables `dbt build` wrote.

The protocol requires the report to quote files, not memory: every table is first
written to a CSV in the results folder, and the Markdown is rendered from those CSVs
read back. The report also exports the panels as Stata .dta files and a do-file with
the equivalent reghdfe commands, since the estimates here come from pyfixest."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from lookahead.artefacts import Folders, check_output_folders, retire_study, write_artefact_set
from lookahead.config import Study
from lookahead.errors import UserError
from lookahead.identity import StaleResultError, check_current, held_by, sync_status
from lookahead.pages import assets, paper
from lookahead.pages import html as page_html
from lookahead.pages.blocks import Section
from lookahead.pages.data import bootstrap_histogram, derived_tables
from lookahead.pages.markdown import render as render_markdown
from lookahead.pages.sections import Context, build
from lookahead.paper.table5_reading import reading_frame
from lookahead.report_names import REGRESSIONS, TABLE5_READING, TABLES
from lookahead.safe_output import write_csv as safe_csv
from lookahead.stats.protocol import StatsSections
from lookahead.stats.stata import export_stata_panels, write_stata_do_file
from lookahead.stats.verdict import Outcome, evaluate, facts_from_row


class ReportError(UserError, RuntimeError):
    """No current result to report: dbt build did not run, failed, or ran on other inputs."""


@dataclass
class ReportFiles:
    report: Path
    csvs: list[Path]
    stata: list[Path]
    verdict: str
    page: Path | None = None


def export_tables(con: duckdb.DuckDBPyConnection, results_dir: Path) -> list[Path]:
    """One CSV per table and one per regression, each written to a temp file and renamed."""
    existing = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
    missing = [t for t in ("panel_pre", "regression_results", "verdict") if t not in existing]
    if missing:
        raise ReportError(
            f"table(s) {', '.join(missing)} not found in the study database: run `dbt build` "
            "first (a failed gate leaves the regression tables unbuilt)"
        )
    results_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def write(df: pd.DataFrame, name: str) -> None:
        written.append(write_csv(df, results_dir, name))

    for table in TABLES:
        if table in existing:
            write(con.sql(f"select * from {table}").df(), table)
    results = con.sql("select * from regression_results").df()
    for spec, sample in REGRESSIONS:
        part = results[(results["spec"] == spec) & (results["sample"] == sample)]
        if len(part):
            write(part, f"regression_{spec}_{sample}")
    draws = 0
    if "bootstrap_results" in existing:
        boot = con.sql("select * from bootstrap_results").df()
        draws = int(boot["coefficient"].notna().sum()) if "coefficient" in boot else len(boot)
        write(bootstrap_histogram(boot), "bootstrap_histogram")
    if "paper_tables" in existing:  # Table V's facts, which the verdict section reads beside the verdict
        reading = reading_frame(con.sql("select * from paper_tables").df(), draws)
        if len(reading):
            write(reading, TABLE5_READING)
    return written


def write_csv(df: pd.DataFrame, results_dir: Path, name: str) -> Path:
    """<results_dir>/<name>.csv, safe to open in a spreadsheet (lookahead.safe_output:
    no formula cell, no control byte), via a temp name and a rename."""
    path = results_dir / f"{name}.csv"
    tmp = path.with_suffix(".csv.tmp")
    safe_csv(df, tmp)
    os.replace(tmp, path)
    return path


def _read(results_dir: Path, name: str) -> pd.DataFrame:
    path = results_dir / f"{name}.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def build_sections(results_dir: Path, database: Mapping[str, pd.DataFrame] | None = None) -> tuple[list[Section], Outcome]:
    """The report's sections (lookahead.pages.sections.SECTIONS) from the CSVs in
    results_dir; `database` holds the study database's tables the paper section reads
    (lookahead.pages.paper.database_tables; without them it is left out)."""
    # the study the build recorded (its settings_json, resolved by the loader), read back typed
    study = Study.from_json(str(_read(results_dir, "study_settings").iloc[0]["settings_json"]))
    verdict = _read(results_dir, "verdict").iloc[0]
    outcome = evaluate(facts_from_row(verdict))  # the Outcome every section is rendered from
    if outcome.decision != str(verdict["verdict"]):
        raise ReportError(
            f"verdict.csv says {verdict['verdict']!r} but its facts give "
            f"{outcome.decision!r}: the verdict table was built by another version; "
            "rerun `dbt build`"
        )
    ctx = Context(results_dir=results_dir, study=study, outcome=outcome, verdict=verdict, database=dict(database or {}))
    return build(ctx), outcome


def render(results_dir: Path, database: Mapping[str, pd.DataFrame] | None = None) -> tuple[str, str]:
    """(REPORT.md text, verdict) rendered from the CSVs in results_dir."""
    sections, outcome = build_sections(results_dir, database)
    return render_markdown(sections), outcome.decision


def refuse(study: Study, database: Path, why: str) -> None:
    """Raise ReportError after retiring the results folder's report set (every file the
    last report wrote, lookahead.artefacts) and marking the database's verdict row stale:
    a result that is not current is presented nowhere (README, "Current means current")."""
    moved = retire_study(study, why)
    marked = sync_status(database, why)
    where = []
    if moved:
        where.append(f"the old report moved to {study.results_dir / 'stale'}")
    if marked:
        where.append("the verdict table marked stale (result_status)")
    raise ReportError(f"{why}; no report written" + (f" ({'; '.join(where)})" if where else ""))


def write_report(study: Study, database: Path | None = None) -> ReportFiles:
    """Export CSVs, Stata files and REPORT.md for a built study, after checking that the
    database's verdict is this study's current result (lookahead.identity).

    The whole set is written into staging folders and swapped in at once
    (lookahead.artefacts.write_artefact_set): a kill or a failure leaves the old set or
    the new one, never old and new files side by side."""
    database = database or study.database
    check_output_folders(study)
    if not database.exists():
        refuse(study, database, f"study database {database} not found: run `dbt build` first")
    held = held_by(database)
    if held:
        refuse(study, database, held)
    results_dir, outputs_dir = study.results_dir, study.outputs_dir
    out: dict[str, object] = {}

    def produce(stage: Path, panels: Path) -> None:
        con = duckdb.connect(str(database), read_only=True)
        try:
            check_current(con, study)  # StaleResultError: nothing swapped, the old set retired below
            status = (
                con.sql("select result_status from verdict").fetchone()
                if "result_status" in {r[0] for r in con.sql("describe verdict").fetchall()}
                else None
            )
            export_tables(con, stage)
            panel_pre = con.sql("select * from panel_pre").df()
            panel_post = con.sql("select * from panel_post").df()
            settings = StatsSections.from_frame(con.sql("select * from study_settings").df())
            tables = paper.database_tables(con)  # the paper section's ({} when its models were not built)
        finally:
            con.close()
        out["status"] = status
        export_stata_panels(panel_pre, panel_post, panels)
        # the do-file names the folders the files will be in, not the staging folders
        write_stata_do_file(
            stage / "reghdfe.do", settings, panel_pre, panel_post, panel_dir=str(outputs_dir), results_dir=str(results_dir)
        )
        for name, df in derived_tables(panel_pre, panel_post).items():  # the figures' and hit-rate tables
            write_csv(df, stage, name)
        out["verdict"] = write_pages(stage, tables).verdict

    try:
        files = write_artefact_set(Folders.of(study), "a new report replaced them", produce)
    except StaleResultError as exc:
        refuse(study, database, str(exc))
    except duckdb.IOException as err:  # the database was taken by another process meanwhile
        refuse(study, database, held_by(database) or f"cannot read {database}: {str(err).splitlines()[0]}")
    status = out.get("status")
    if isinstance(status, tuple):  # a fetched row: current (again, e.g. after an edit undone): the row says so
        sync_status(database, None, status[0])
    csvs = [f for f in files if f.suffix == ".csv" and f.parent == results_dir]
    stata = [f for f in files if f.suffix in (".dta", ".do")]
    return ReportFiles(
        report=results_dir / "REPORT.md", csvs=csvs, stata=stata, verdict=str(out["verdict"]), page=results_dir / "index.html"
    )


@dataclass
class Pages:
    report: Path
    page: Path
    verdict: str
    assets: list[Path]


def write_pages(results_dir: Path, database: Mapping[str, pd.DataFrame] | None = None) -> Pages:
    """REPORT.md, index.html and the files they show (figure PNGs, LaTeX tables), all
    drawn from one list of sections built from the CSVs in results_dir (and the paper
    section's database tables, when given)."""
    sections, outcome = build_sections(results_dir, database)
    written = assets.write(sections, results_dir)
    report = results_dir / "REPORT.md"
    _write_text(report, render_markdown(sections))
    page = results_dir / "index.html"
    _write_text(page, page_html.render(sections, sections[0].title))
    return Pages(report=report, page=page, verdict=outcome.decision, assets=written)


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
