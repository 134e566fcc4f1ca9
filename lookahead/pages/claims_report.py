"""`lookahead report` of a claim-only study (``study_kind: claims``): results/<study>/
REPORT.md, index.html and the claim tables as CSVs, from the tables `dbt build` wrote.

A claim-only study has no protocol verdict; its result is the claim tables (docs/claims.md
lists their columns). The report is the protocol report's claim section (lookahead.pages.
sections.claims_section) under a head that gives one line per agent, written the same
way: the CSVs first, the pages rendered from them read back, the whole set swapped in at
once (lookahead.artefacts.write_artefact_set).

When is a claim build current? Its last dbt build passed and recorded this study's
settings hash (build_log). A claim-only study's `lookahead run` always builds before it
reports, so the check guards `lookahead report` run alone after a failed build or an
edited study file.

When no instance could be scored (every extraction failed, say) there is no result: the
report refuses in one line that gives the count and the first reason, and writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import duckdb
import pandas as pd

from lookahead.artefacts import Folders, check_output_folders, write_artefact_set
from lookahead.config import Study
from lookahead.identity import _last_build, _not_passed, held_by
from lookahead.pages import assets
from lookahead.pages import html as page_html
from lookahead.pages.blocks import Links, Para, Section
from lookahead.pages.cells import num_or_nan
from lookahead.pages.markdown import render as render_markdown
from lookahead.pages.report import ReportError, ReportFiles, _write_text, refuse, write_csv
from lookahead.pages.sections import ResultTables, claims_section, glossary_para
from lookahead.pages.text import code

#: The claim tables a claim-only build writes, exported one CSV each (the claims section
#: and the head read them back).
CLAIM_TABLES = ("claims_summary", "instance_leakage", "claims", "claims_repredict", "claims_rejects", "study_settings")


class ClaimTables(ResultTables):
    """The exported CSVs of a claim-only report (CLAIM_TABLES), as the claims section
    reads them, and the study they are of."""


def _f3(x: object) -> str:
    v = num_or_nan(x)
    return f"{v:.3f}" if math.isfinite(v) else "n/a"


def agent_lines(summary: pd.DataFrame) -> list[str]:
    """One line per agent and task from ``claims_summary``: what `lookahead report` prints
    and the report's head quotes."""
    return [
        f"agent {r.agent} ({r.task_kind}): {int(r.n_scored)} of {int(r.n_instances)} instances scored; "
        f"OLR {_f3(r.olr)}, Shapley-DCLR {_f3(r.shapley_dclr)}, top-1 leakage {_f3(r.top1_leakage)}, "
        f"{r.task_metric_name} {_f3(r.task_metric)}"
        for r in summary.sort_values(["agent", "task"], kind="stable").itertuples()
    ]


def nothing_scored(summary: pd.DataFrame, rejects: pd.DataFrame) -> str | None:
    """Why the study has no result, or None: no instance of any agent was scored."""
    n = int(pd.to_numeric(summary.get("n_instances"), errors="coerce").fillna(0).sum()) if len(summary) else 0
    scored = int(pd.to_numeric(summary.get("n_scored"), errors="coerce").fillna(0).sum()) if len(summary) else 0
    if scored:
        return None
    first = str(rejects["reason"].iloc[0]) if len(rejects) and "reason" in rejects else "no reason recorded"
    return (
        f"no instance could be scored ({n} of {n} rejected; first: {first}); see the table claims_rejects in the study database"
    )


def _head(study: Study, tables: ClaimTables) -> Section:
    summary = tables.table("claims_summary")
    s = study
    inputs = s.claims.claims_predictions_path or s.claims.claims_instances_path
    return Section(
        "answer",
        f"Claim-level leakage: {s.output.study_name}",
        "",
        [
            *(Para(line + ".") for line in agent_lines(summary)),
            Para(
                f"Model {code(s.backend.model_id)} (backend {s.backend.backend}), task kind "
                f"{s.claims.claims_task_kind}, predictions {code(inputs)}. "
                "A claim-only study has no protocol verdict: these figures are the result. Every number "
                "is read from the CSV files in this folder."
            ),
            glossary_para(s.results_dir),
        ],
        level=1,
    )


def _files(results_dir: Path) -> Section:
    csvs = tuple(sorted(p.relative_to(results_dir).as_posix() for p in results_dir.glob("*.csv")))
    return Section("files", "Files", "Every table of this report as a CSV.", [Links((("CSV", csvs),))])


#: The claim report, in order (as lookahead.pages.sections.SECTIONS for the protocol's).
CLAIM_SECTIONS: tuple[Callable[[Study, ClaimTables], Section | None], ...] = (
    _head,
    lambda study, tables: claims_section(tables),
    lambda study, tables: _files(tables.results_dir),
)


def _check_claims_current(con: duckdb.DuckDBPyConnection, study: Study) -> set[str]:
    """The database's tables, once its claim tables are this study's current build."""
    tables = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
    missing = [t for t in ("claims_summary", "build_log") if t not in tables]
    if missing:
        raise ReportError(f"table(s) {', '.join(missing)} not found in {study.database}: run `lookahead run` first")
    last = _last_build(con, tables)
    if last is None:
        raise ReportError(f"no finished dbt build of study '{study.name}' is recorded (build_log): run `lookahead run`")
    if last[1] != "success":
        raise ReportError(_not_passed(study, last))
    row = con.execute("select settings_hash from build_log where invocation_id = ? and status = 'started'", [last[0]]).fetchone()
    if row is not None and row[0] and row[0] != study.settings_hash:
        raise ReportError(
            f"the claim tables were built from other settings of study '{study.name}' (dbt invocation {last[0]}): "
            "run `lookahead run` again"
        )
    return tables


def write_claim_report(study: Study) -> tuple[ReportFiles, list[str]]:
    """The claim-only study's report set, and the lines per agent it leads with."""
    database = study.database
    check_output_folders(study)
    if not database.exists():
        raise ReportError(f"study database {database} not found: run `lookahead run` first")
    held = held_by(database)
    if held:
        raise ReportError(held)
    lines: list[str] = []

    def produce(stage: Path, panels: Path) -> None:
        con = duckdb.connect(str(database), read_only=True)
        try:
            present = _check_claims_current(con, study)
            frames = {t: con.sql(f"select * from {t}").df() for t in CLAIM_TABLES if t in present}
        finally:
            con.close()
        why = nothing_scored(frames["claims_summary"], frames.get("claims_rejects", pd.DataFrame()))
        if why:
            raise ReportError(why)
        for name, df in frames.items():
            write_csv(df, stage, name)
        tables = ClaimTables(stage, study)
        sections = [sec for make in CLAIM_SECTIONS if (sec := make(study, tables)) is not None]
        assets.write(sections, stage)
        _write_text(stage / "REPORT.md", render_markdown(sections))
        _write_text(stage / "index.html", page_html.render(sections, sections[0].title))
        lines.extend(agent_lines(frames["claims_summary"]))

    try:
        files = write_artefact_set(Folders.of(study), "a new report replaced them", produce)
    except ReportError as exc:
        refuse(study, database, str(exc))  # the old report set retired: it is not this build's
    except duckdb.IOException as err:
        refuse(study, database, held_by(database) or f"cannot read {database}: {str(err).splitlines()[0]}")
    results = study.results_dir
    report = ReportFiles(
        report=results / "REPORT.md",
        csvs=[f for f in files if f.suffix == ".csv" and f.parent == results],
        stata=[],
        verdict="",
        page=results / "index.html",
    )
    return report, lines
