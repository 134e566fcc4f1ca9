"""The paper's section of the report: Tables I-VI and Figure III on the study's data, as
far as the data allow: the section's heading names the tables it prints, and a line names
each absent one with the reason (tables_shown).

The other sections read the CSVs in the results folder; this one reads tables of the
study database (DATABASE_TABLES: `paper_tables`, `bootstrap_results`, the panels and
`study_settings`), which the report reads while its read-only connection is open
(lookahead.pages.report.write_report) and hands to the section in its Context
(lookahead.pages.sections.paper_section). It writes LaTeX tables to <results>/tables/ and
figures to <results>/figures/, and returns Markdown that links them (relative paths, so
the figures sit next to REPORT.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import duckdb
import pandas as pd

from lookahead.pages import charts
from lookahead.pages.blocks import Figure
from lookahead.paper import figures, render
from lookahead.paper import tables as T
from lookahead.paper.dbt_entry import settings_from_frame
from lookahead.report_names import PAPER_TABLES
from lookahead.stats.verdict import fmt_p

#: the study database's tables the section reads (the panels for Table I and the figures)
DATABASE_TABLES = ("paper_tables", "bootstrap_results", "panel_pre", "panel_post", "study_settings")
#: each paper table's caption, in the order of its names (lookahead.report_names.PAPER_TABLES,
#: which the retire step reads)
TITLES = dict(
    zip(
        PAPER_TABLES,
        (
            "Table II. Outcome on LLM prediction, LAP and LLM x LAP",
            "Table III. Binary moderator with double and triple interactions",
            "Table IV. LAP versus first-token probability and stated confidence",
            "Table V. In-sample and out-of-sample, standardized within period",
            "Table VI. Outcome on five-level LLM prediction, LAP and LLM x LAP (clustered by firm)",
        ),
        strict=True,
    )
)


def database_tables(con: duckdb.DuckDBPyConnection) -> dict[str, pd.DataFrame]:
    """The DATABASE_TABLES the database holds, by name ({} when the paper's models were not
    built: no `paper_tables`)."""
    q = "select table_name from information_schema.tables where table_name = ?"
    held = [t for t in DATABASE_TABLES if con.execute(q, [t]).fetchone()]
    if "paper_tables" not in held:
        return {}
    # a name from the fixed tuple above, never from a setting
    return {t: con.sql(f"select * from {t}").df() for t in held}


#: Why a paper table is absent when its build left no note saying so (each reason is the
#: condition lookahead.paper.analysis runs the table under; README, "paper analysis")
ABSENT_REASON = {
    "II": "not estimated on this study's data",
    "III": "needs a binary `moderator_column`",
    "IV": "needs a varying first-token probability or stated confidence",
    "V": "needs rows before and after the cutoff",
    "VI": "needs a five-level forecast (-1, -0.5, 0, 0.5, 1), as the paper's capital-expenditure study",
}
ROMAN = {"table2": "II", "table3": "III", "table4": "IV", "table5": "V", "table6": "VI"}


def tables_shown(long: pd.DataFrame, pre: pd.DataFrame, s: T.PaperSections) -> tuple[list[str], dict[str, str]]:
    """(the paper's tables this study prints, in the paper's order; {absent table: why}).
    Table I needs pre-cutoff rows; II-VI are printed when `paper_tables` holds their
    coefficients. An absent table's reason is its build note where there is one, else
    ABSENT_REASON."""
    held = set(long.loc[long["kind"] == "coefficient", "paper_table"])
    notes = [str(n) for n in long.loc[long["kind"] == "note", "note"]]
    shown = ["I"] if len(pre) else []
    absent: dict[str, str] = {} if len(pre) else {"I": "no pre-cutoff rows"}
    for name, roman in ROMAN.items():
        if name in held:
            shown.append(roman)
            continue
        note = next((n for n in notes if n.startswith(f"Table {roman} ")), "")
        if roman == "VI" and not T.is_five_level(pre, s):
            absent[roman] = ABSENT_REASON["VI"] + "; this study's forecast is not five-level"
        else:
            absent[roman] = ABSENT_REASON[roman] + ("; the note below says what this study lacks" if note else "")
    return shown, absent


def measure_label(tables: Mapping[str, pd.DataFrame]) -> str:
    """The LAP measure the paper's tables ran on, as their captions name it ("LAP" when the
    paper's models were not built)."""
    if "study_settings" not in tables or "panel_pre" not in tables:
        return "LAP"
    s, _, _ = settings_from_frame(tables["study_settings"])
    return T.paper_measure(tables["panel_pre"], s)[0].lap_label


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def paper_markdown(tables: Mapping[str, pd.DataFrame], results_dir: Path) -> str:
    """Markdown for the report ("" when the paper's models were not built), from the
    tables `database_tables` read."""
    if "paper_tables" not in tables:
        return ""
    results_dir = Path(results_dir)
    long = tables["paper_tables"]
    boot = tables.get("bootstrap_results", pd.DataFrame())
    pre, post = tables["panel_pre"], tables["panel_post"]
    s, _, _ = settings_from_frame(tables["study_settings"])
    s, _ = T.paper_measure(pre, s)  # the measure paper_tables ran on
    coef = long[long["kind"] == "coefficient"]
    shown, absent = tables_shown(long, pre, s)
    md = [
        "",
        f"## Paper analysis (Tables {', '.join(shown)}{', Figure III' if len(boot) else ''})",
        "",
        f"LAP measure: {s.lap_label}. Fixed effects: {' + '.join(s.fixed_effects)}. "
        f"Paper tables cluster by `{s.paper.paper_cluster}` (var `paper_cluster`; Table VI by "
        f"`{T.cluster_of(s, 'table6')}`, as the paper). Source table: `paper_tables`.",
        "",
        f"**Which of the paper's six tables this study gives.** Printed: {', '.join(shown)}."
        + (f" Not printed: {'; '.join(f'{k} ({why})' for k, why in absent.items())}." if absent else ""),
        "",
    ]
    for sample, df in (("pre", pre), ("post", post)):
        if len(df):
            desc = T.table1(df, s)
            title = f"Table I. Descriptive statistics ({sample}-cutoff)"
            md += [render.markdown_descriptives(desc, title), ""]
            _write(results_dir / "tables" / f"table1_{sample}.tex", render.latex_descriptives(desc, title))
    for name, title in TITLES.items():
        if not (coef["paper_table"] == name).any():
            continue
        extra: dict[str, list[str]] = {}
        notes = [n for n in coef.loc[coef["paper_table"] == name, "note"].dropna().unique()]
        if name == "table5":
            b = long[(long["kind"] == "bootstrap")]
            if len(b):
                # the bootstrap p printed as everywhere else (fmt_p): one p for Table V
                n_draws = int(boot["coefficient"].notna().sum()) if "coefficient" in boot else 0
                extra[T.BOOTSTRAP_ROW] = ["", "", "", f"[{fmt_p(float(b['estimate'].iloc[0]), n_draws)}]"]
                notes.append(str(b["note"].iloc[0]))
            d = long[(long["kind"] == "difference")]
            if len(d):
                r = d.iloc[0]
                extra[T.DIFFERENCE_ROW] = ["", f"{float(r['estimate']):.3f}", "", f"[{fmt_p(float(r['p']))}]"]
                notes.append(
                    f"{r['note']}: difference {float(r['estimate']):.4g} (SE "
                    f"{float(r['std_error']):.4g}, t {float(r['t']):.3g}, {r['vcov']})."
                )
            extra["Sample period"] = ["In-sample", "In-sample", "Out-of-sample", "Out-of-sample"]
        title = f"{title} ({s.lap_label})"  # every caption names the measure it ran on
        md += [render.markdown_table(coef, name, title, extra, notes), ""]
        _write(results_dir / "tables" / f"{name}.tex", render.latex_table(coef, name, title, extra, notes))
    mags = long[long["kind"] == "magnitude"]
    if len(mags):
        md += [
            "Economic magnitudes (Table II): " + "; ".join(f"{r.term} = {r.estimate:.4g}" for r in mags.itertuples()) + ".",
            "",
        ]
    for n in long.loc[long["kind"] == "note", "note"]:
        md += [f"_{n}_", ""]
    figs = []
    if len(pre) and len(post) and s.lap in pre.columns:
        figs.append(
            (
                f"LAP before vs after the training cutoff ({s.lap_label})",
                figures.lap_histograms(pre, post, s.lap, results_dir / "figures" / "lap_hist.png", s.lap_label),
            )
        )
        figs.append(
            (
                f"Forecast accuracy by LAP decile ({s.lap_label}; {figures.DECILE_RULE}; the paper "
                "section's measure: the key figure draws the verdict's measure, so the two differ where the measures do)",
                figures.accuracy_figure(
                    pre, post, s.lap, results_dir / "figures" / "accuracy_by_lap_decile.png", s.llm, s.outcome, s.lap_label
                ),
            )
        )
    if len(boot):
        figs.append(
            (
                f"Figure III. Pairs bootstrap of the out-of-sample interaction coefficient ({s.lap_label})",
                figures.bootstrap_figure(
                    boot["coefficient"].to_numpy(),
                    float(boot["in_sample_estimate"].iloc[0]),
                    results_dir / "figures" / "bootstrap.png",
                    float(boot["p_value"].iloc[0]),
                ),
            )
        )
    for title, path in figs:
        md += [f"![{title}]({path.relative_to(results_dir).as_posix()})", ""]
    md.append("LaTeX versions of every table: `tables/*.tex`.\n")
    return "\n".join(md)


def bootstrap_figure(results_dir: Path, label: str = "LAP") -> Figure | None:
    """Figure III for the HTML page: the pairs bootstrap's distribution, interactive, read
    from `bootstrap_histogram.csv` (None without one); `label` names the paper tables'
    LAP measure (measure_label)."""
    hist_path = Path(results_dir) / "bootstrap_histogram.csv"
    if not hist_path.exists():
        return None
    hist = pd.read_csv(hist_path)
    if hist.empty:
        return None
    p, draws = float(hist["p_value"].iloc[0]), int(hist["draws"].iloc[0])
    return Figure(
        "bootstrap",
        f"Figure III. Pairs bootstrap of the out-of-sample interaction ({label})",
        charts.bootstrap(hist, fmt_p(p, draws), label),
        in_markdown=False,
    )
