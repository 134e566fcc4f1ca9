"""`lookahead compare`: several studies' current results side by side (one model each,
typically), in results/compare/COMPARE.md and index.html.

Each study is read from its database (a study file names it; ``--db`` names the file and
the study is the one the build recorded in `study_settings`). A study whose verdict is not
its current result (settings, input files or code changed since its build) is refused in
one line, as `lookahead report` refuses it: a comparison never mixes a stale result in.
The pages come from the same section blocks and renderers as a study's report
(lookahead.pages) and are written as one set (lookahead.artefacts)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import duckdb
import pandas as pd

from lookahead.artefacts import Folders, write_artefact_set
from lookahead.config import PROJECT_ROOT, Study
from lookahead.errors import UserError
from lookahead.identity import StaleResultError, check_current, held_by, sync_status
from lookahead.measures import MEASURES
from lookahead.pages import assets
from lookahead.pages import html as page_html
from lookahead.pages.blocks import Figure, Links, Para, Section, Table
from lookahead.pages.charts import HEIGHT, LEGEND, MONTH_AXIS, SAMPLE_SHAPES, WIDTH, _records
from lookahead.pages.data import accuracy_by_lap_decile, lap_by_month
from lookahead.pages.markdown import render as render_markdown
from lookahead.pages.sections import glossary_para
from lookahead.pages.text import code
from lookahead.paper.figures import DECILE_RULE
from lookahead.safe_output import write_csv as safe_csv
from lookahead.stats.verdict import (
    PLACEBO,
    collapsed_lap,
    evaluate,
    facts_from_row,
    fmt_num,
    fmt_t,
    not_informative,
)

COMPARE_DIR = Path("results") / "compare"


class CompareError(UserError, RuntimeError):
    """A study that cannot be compared (no database, not current, not built); one line."""


@dataclass
class StudyResult:
    """What the comparison reads of one study, all from its database."""

    study: Study
    database: Path
    verdict: pd.Series
    lap: pd.DataFrame
    claims: pd.DataFrame
    month: pd.DataFrame
    accuracy: pd.DataFrame


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}


def load(database: Path, study: Study | None = None) -> StudyResult:
    """One study's current results; CompareError when it has none."""
    if not database.exists():
        raise CompareError(f"study database {database} not found: run `lookahead run` first")
    held = held_by(database)
    if held:
        raise CompareError(held)
    con = duckdb.connect(str(database), read_only=True)
    stale: StaleResultError | None = None
    try:
        tables = _tables(con)
        if study is None:
            if "study_settings" not in tables:
                raise CompareError(f"{database} records no study (no study_settings table): run dbt build")
            recorded = con.sql("select settings_json from study_settings").fetchone()
            if recorded is None:
                raise CompareError(f"{database} records no study (study_settings is empty): run dbt build")
            study = Study.from_json(str(recorded[0]))
        try:
            check_current(con, study)
        except StaleResultError as exc:
            stale = exc
        else:
            verdict = con.sql("select * from verdict").df().iloc[0]
            lap = con.sql("select * from lap_distribution").df() if "lap_distribution" in tables else pd.DataFrame()
            claims = con.sql("select * from claims_summary").df() if "claims_summary" in tables else pd.DataFrame()
            pre = con.sql("select * from panel_pre").df()
            post = con.sql("select * from panel_post").df()
    finally:
        con.close()
    # the verdict row says what compare found (written once the read-only connection is closed)
    if stale is not None:
        sync_status(database, stale)
        raise CompareError(f"study '{study.name}' ({database}): {stale}; not compared")
    sync_status(database, None, str(verdict.get("result_status", "")))
    return StudyResult(study, database, verdict, lap, claims, lap_by_month(pre, post), accuracy_by_lap_decile(pre, post))


def _label(r: StudyResult) -> str:
    return f"{r.study.name} ({r.study.backend.model_id})"


def _mean(lap: pd.DataFrame, measure: str, sample: str) -> float:
    if lap.empty:
        return math.nan
    sel = lap[(lap["measure"] == measure) & (lap["sample"] == sample)]
    return float(sel["mean"].iloc[0]) if len(sel) else math.nan


def comparison_frame(results: list[StudyResult]) -> pd.DataFrame:
    """One row per study, in the order given: model, cutoff, N, verdict, beta_3 with its t
    and the p the rule read, validation, placebo, mean LAP pre/post per measure (registry
    order), Shapley-DCLR per agent when the study has claim tables."""
    measures = [m for m in MEASURES if any((r.lap["measure"] == m).any() for r in results if len(r.lap))]
    rows = []
    for r in results:
        o = evaluate(facts_from_row(r.verdict))
        b3, flat = o.tests["beta3"], collapsed_lap(o.facts)  # a LAP that barely varies: no test
        row = {
            "study": r.study.name,
            "verdict": o.decision,
            "beta_3 (t)": (
                not_informative(flat["pre"])
                if b3.estimable and "pre" in flat
                else f"{fmt_num(b3.estimate)} (t {fmt_t(b3.t)})"
                if b3.estimable
                else "not estimable"
            ),
            "p the rule read": b3.p_phrase() if b3.estimable and "pre" not in flat else "NA",
            "placebo": PLACEBO[o.placebo][1].removeprefix("placebo "),
        }
        if any(len(x.claims) for x in results):
            row["Shapley-DCLR"] = (
                (
                    "; ".join(
                        f"{a} {float(v):.3f}"
                        for a, v in zip(r.claims["agent"], r.claims["shapley_dclr"], strict=False)
                        if pd.notna(v)
                    )
                    or "none"
                )
                if len(r.claims)
                else "no claim tables"
            )
        row |= {
            "validation": "present" if o.validation_present else "not present",
            "model": code(r.study.backend.model_id),
            "cutoff": str(r.study.protocol.training_cutoff),
            "N pre / post": f"{o.facts.beta3.n_obs} / {o.facts.placebo.n_obs}",
        }
        for m in measures:
            row[f"mean LAP {m} pre / post"] = f"{fmt_num(_mean(r.lap, m, 'pre'))} / {fmt_num(_mean(r.lap, m, 'post'))}"
        rows.append(row)
    return pd.DataFrame(rows)


#: The columns of the page's and COMPARE.md's one-row-per-study table, in order: the
#: answer and what decides it first (Shapley-DCLR among them), the study's identity after.
#: The mean LAP of every measure goes to a table of its own (lap_frame); comparison.csv
#: keeps every column.
STUDY_TABLE_COLUMNS = (
    "study",
    "verdict",
    "beta_3 (t)",
    "p the rule read",
    "placebo",
    "Shapley-DCLR",
    "validation",
    "model",
    "cutoff",
    "N pre / post",
)


def study_table_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """comparison_frame's STUDY_TABLE_COLUMNS (Shapley-DCLR only when a study has claim tables)."""
    return frame[[c for c in STUDY_TABLE_COLUMNS if c in frame.columns]]


def lap_frame(results: list[StudyResult]) -> pd.DataFrame:
    """Mean LAP before and after the cutoff, one row per study and measure (registry
    order), the measure each verdict reads marked: the comparison's per-study rows, where
    a column per measure would make the study table too wide to read."""
    measures = [m for m in MEASURES if any((r.lap["measure"] == m).any() for r in results if len(r.lap))]
    rows = []
    for r in results:
        for m in measures:
            if len(r.lap) and (r.lap["measure"] == m).any():
                rows.append(
                    {
                        "study": r.study.name,
                        "measure": MEASURES[m].label,
                        "verdict reads it": "yes" if m == r.study.measures.lap_measure else "",
                        "mean LAP pre": fmt_num(_mean(r.lap, m, "pre")),
                        "mean LAP post": fmt_num(_mean(r.lap, m, "post")),
                    }
                )
    return pd.DataFrame(rows, columns=["study", "measure", "verdict reads it", "mean LAP pre", "mean LAP post"])


def _overlay_month(results: list[StudyResult]) -> dict:
    df = pd.concat([r.month.assign(study=_label(r)) for r in results if len(r.month)], ignore_index=True)
    cuts = pd.DataFrame([{"study": _label(r), "cutoff": str(r.study.protocol.training_cutoff)} for r in results])
    line = (
        alt.Chart(alt.Data(values=_records(df)))
        .mark_line(point=alt.OverlayMarkDef(size=45, filled=True))
        .encode(
            x=alt.X("month:T", title="realization month (target_date, year-month)", axis=MONTH_AXIS),
            y=alt.Y("mean_lap:Q", title="mean LAP (each study's verdict measure)"),
            color=alt.Color("study:N", title="study", legend=LEGEND),
            shape=alt.Shape("sample:N", scale=SAMPLE_SHAPES, title="sample", legend=LEGEND),
            detail="sample:N",
            tooltip=[
                "study:N",
                "sample:N",
                alt.Tooltip("month:T", format="%Y-%m"),
                "n:Q",
                alt.Tooltip("mean_lap:Q", format=".4g"),
            ],
        )
    )
    rule = (
        alt.Chart(alt.Data(values=_records(cuts)))
        .mark_rule(strokeDash=[6, 4])
        .encode(x="cutoff:T", color="study:N", tooltip=["study:N", "cutoff:N"])
    )
    return (
        alt.layer(line, rule)
        .properties(
            width=WIDTH,
            height=HEIGHT,
            title=["Mean LAP by realization month (each study's verdict measure)", "each study's stated cutoff dashed"],
        )
        .to_dict()
    )


def _overlay_accuracy(results: list[StudyResult]) -> dict:
    df = pd.concat([r.accuracy.assign(study=_label(r)) for r in results if len(r.accuracy)], ignore_index=True)
    chart = (
        alt.Chart(alt.Data(values=_records(df)))
        .mark_line(point=alt.OverlayMarkDef(size=45, filled=True))
        .encode(
            x=alt.X("decile:O", title=f"LAP decile ({DECILE_RULE})", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("accuracy:Q", title="directional accuracy", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("study:N", title="study", legend=LEGEND),
            shape=alt.Shape("sample:N", scale=SAMPLE_SHAPES, title="sample", legend=LEGEND),
            strokeDash=alt.StrokeDash(
                "sample:N", scale=alt.Scale(domain=["pre", "post"], range=[[1, 0], [5, 3]]), title="sample", legend=LEGEND
            ),
            tooltip=["study:N", "sample:N", "decile:O", "n:Q", alt.Tooltip("accuracy:Q", format=".3f")],
        )
    )
    return chart.properties(
        width=WIDTH,
        height=HEIGHT,
        title=["Accuracy by LAP decile (each study's verdict measure)", "pre-cutoff solid circles, post-cutoff dashed triangles"],
    ).to_dict()


def sections(results: list[StudyResult], out_dir: Path) -> list[Section]:
    frame = comparison_frame(results)
    verdicts = ", ".join(f"{r.study.name}: {v}" for r, v in zip(results, frame["verdict"], strict=False))
    head = Section(
        "answer",
        "Models side by side",
        "",
        [
            Para(
                f"**{len(results)} studies compared.** {verdicts}. Each row is read from the study's "
                "database, and only a study whose verdict is its current result is compared."
            ),
            glossary_para(out_dir),
        ],
        level=1,
    )
    laps = lap_frame(results)
    table = Section(
        "studies",
        "One row per study",
        "Each study's verdict, the detection test with the p its rule read, the placebo, "
        "Shapley-DCLR where the study has claims, and validation; then each study's mean LAP "
        "before and after its cutoff, one row per measure.",
        [
            Table(study_table_frame(frame), "comparison", csv="comparison.csv"),
            Table(
                laps,
                "comparison_lap",
                caption="Mean LAP before and after each study's stated cutoff, per measure "
                "(docs/measures.md); the verdict reads the marked one. Reference-model LAP may rise after the "
                "cutoff where the others fall: it is a difference against another model (docs/measures.md says why).",
            )
            if len(laps)
            else Para("No study has LAP values."),
        ],
    )
    figs: list = []
    if any(len(r.month) for r in results):
        figs.append(
            Figure(
                "lap_by_month",
                f"Mean LAP by realization month, studies overlaid ({_measures_named(results)})",
                _overlay_month(results),
                "figures/lap_by_month.png",
            )
        )
    if any(len(r.accuracy) for r in results):
        figs.append(
            Figure(
                "accuracy_by_lap_decile",
                f"Accuracy by LAP decile, studies overlaid ({_measures_named(results)}; {DECILE_RULE})",
                _overlay_accuracy(results),
                "figures/accuracy_by_lap_decile.png",
            )
        )
    figures = Section(
        "figures",
        "Figures, overlaid",
        "The studies' LAP over time and accuracy by LAP decile on common axes.",
        figs or [Para("No figure: no study has LAP values.")],
    )
    links = []
    for r in results:
        page = r.study.results_dir / "index.html"
        rel = Path(_relpath(page, out_dir))
        links.append((r.study.name, (rel.as_posix(), (rel.parent / "REPORT.md").as_posix())))
    files = Section("files", "Each study's report", "The full report and page of every study compared.", [Links(tuple(links))])
    return [head, table, figures, files]


def _measures_named(results: list[StudyResult]) -> str:
    """Which measure each overlaid study plots: its verdict's."""
    return "; ".join(f"{r.study.name}: {MEASURES[r.study.measures.lap_measure].label}" for r in results)


def _relpath(path: Path, start: Path) -> str:
    return os.path.relpath(path.resolve(), start.resolve())


def write_compare(results: list[StudyResult], out_dir: Path) -> tuple[Path, Path]:
    """COMPARE.md, index.html, comparison.csv and the figure PNGs, swapped in as one set."""
    out_dir = out_dir.resolve()
    secs = sections(results, out_dir)

    def produce(stage: Path, _outputs: Path) -> None:
        safe_csv(comparison_frame(results), stage / "comparison.csv")
        assets.write(secs, stage)
        (stage / "COMPARE.md").write_text(render_markdown(secs), encoding="utf-8")
        (stage / "index.html").write_text(page_html.render(secs, "Models side by side"), encoding="utf-8")

    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = out_dir.parent.parent / "outputs" / out_dir.name if out_dir.parent.name == "results" else out_dir / ".outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    write_artefact_set(Folders(out_dir, outputs.resolve()), "a new comparison replaced them", produce)
    return out_dir / "COMPARE.md", out_dir / "index.html"


def compare(study_files: list[str], databases: list[str], out_dir: Path = PROJECT_ROOT / COMPARE_DIR) -> tuple[Path, Path]:
    """Load every study (CompareError on the first that cannot be compared) and write the pages."""
    from lookahead.config import load_study

    if len(study_files) + len(databases) < 1:
        raise CompareError("name at least one study file or --db database to compare")
    results = [load(s.database, s) for s in (load_study(f) for f in study_files)]
    results += [load(Path(d).resolve()) for d in databases]
    names = [r.study.name for r in results]
    if len(set(names)) < len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise CompareError(f"study {', '.join(dup)} named twice: compare each study once")
    return write_compare(results, out_dir)
