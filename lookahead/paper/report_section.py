"""The paper's section of REPORT.md, rendered from the built DuckDB tables.

`lookahead.report.write_report(extra=paper_section)` calls this with a read-only
connection; it reads `paper_tables`, `bootstrap_results`, `panel_pre`, `panel_post` and
`study_settings`, writes LaTeX tables to <results>/tables/ and figures to
<results>/figures/, and returns Markdown that links them (relative paths, so the
figures sit next to REPORT.md)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pandas as pd

from lookahead.paper import figures, render
from lookahead.paper import tables as T
from lookahead.paper.dbt_entry import settings_from_frame
from lookahead.paper.table5_reading import TABLE5_READING, reading_frame
from lookahead.safe_output import safe_frame
from lookahead.stats.verdict import fmt_p

TITLES = {
    "table2": "Table II. Outcome on LLM prediction, LAP and LLM x LAP",
    "table3": "Table III. Binary moderator with double and triple interactions",
    "table4": "Table IV. LAP versus first-token probability and stated confidence",
    "table5": "Table V. In-sample and out-of-sample, standardized within period",
    "table6": "Table VI. Outcome on five-level LLM prediction, LAP and LLM x LAP (clustered by firm)",
}


def _exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    q = "select count(*) from information_schema.tables where table_name = ?"
    return bool(con.execute(q, [name]).fetchone()[0])


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def paper_section(con: duckdb.DuckDBPyConnection, results_dir: Path) -> str:
    """Markdown for REPORT.md (empty when the paper models were not built)."""
    if not _exists(con, "paper_tables"):
        return ""
    results_dir = Path(results_dir)
    long = con.sql("select * from paper_tables").df()
    boot = con.sql("select * from bootstrap_results").df() if _exists(con, "bootstrap_results") else pd.DataFrame()
    pre = con.sql("select * from panel_pre").df()
    post = con.sql("select * from panel_post").df()
    s, _, _ = settings_from_frame(con.sql("select * from study_settings").df())
    s, _ = T.paper_measure(pre, s)  # the measure paper_tables ran on
    coef = long[long["kind"] == "coefficient"]
    reading = reading_frame(long)
    if len(reading):  # REPORT.md's verdict section renders the Table V explanation from it
        results_dir.mkdir(parents=True, exist_ok=True)
        _write(results_dir / f"{TABLE5_READING}.csv", safe_frame(reading).to_csv(index=False))
    md = ["", "## Paper analysis (Tables I-V, Figure III)", "",
          f"LAP measure: {s.lap_label}. Fixed effects: {' + '.join(s.fixed_effects)}. "
          f"Paper tables cluster by `{s.cluster}` (var `paper_cluster`; Table VI by "
          f"`{T.cluster_of(s, 'table6')}`, as the paper). Source table: `paper_tables`.", ""]
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
                extra[T.BOOTSTRAP_ROW] = ["", "", "", f"[{fmt_p(float(b['estimate'].iloc[0]))}]"]
                notes.append(str(b["note"].iloc[0]))
            d = long[(long["kind"] == "difference")]
            if len(d):
                r = d.iloc[0]
                extra[T.DIFFERENCE_ROW] = ["", f"{float(r['estimate']):.3f}", "", f"[{float(r['p']):.3f}]"]
                notes.append(f"{r['note']}: difference {float(r['estimate']):.4g} (SE "
                             f"{float(r['std_error']):.4g}, t {float(r['t']):.3g}, {r['vcov']}).")
            extra["Sample period"] = ["In-sample", "In-sample", "Out-of-sample", "Out-of-sample"]
        title = f"{title} ({s.lap_label})"  # every caption names the measure it ran on
        md += [render.markdown_table(coef, name, title, extra, notes), ""]
        _write(results_dir / "tables" / f"{name}.tex", render.latex_table(coef, name, title, extra, notes))
    mags = long[long["kind"] == "magnitude"]
    if len(mags):
        md += ["Economic magnitudes (Table II): "
               + "; ".join(f"{r.term} = {r.estimate:.4g}" for r in mags.itertuples()) + ".", ""]
    for n in long.loc[long["kind"] == "note", "note"]:
        md += [f"_{n}_", ""]
    figs = []
    if len(pre) and len(post) and s.lap in pre.columns:
        figs.append(("LAP before vs after the training cutoff",
                     figures.lap_histograms(pre, post, s.lap, results_dir / "figures" / "lap_hist.png", s.lap_label)))
        figs.append(("Forecast accuracy by LAP decile",
                     figures.accuracy_figure(pre, post, s.lap, results_dir / "figures" / "accuracy_by_lap_decile.png",
                                             s.llm, s.outcome)))
    if len(boot):
        figs.append(("Figure III. Pairs bootstrap of the out-of-sample interaction coefficient",
                     figures.bootstrap_figure(boot["coefficient"].to_numpy(), float(boot["in_sample_estimate"].iloc[0]),
                                              results_dir / "figures" / "bootstrap.png", float(boot["p_value"].iloc[0]))))
    for title, path in figs:
        md += [f"![{title}]({path.relative_to(results_dir).as_posix()})", ""]
    md.append("LaTeX versions of every table: `tables/*.tex`.\n")
    return "\n".join(md)


def paper_sections(con: duckdb.DuckDBPyConnection, results_dir: Path) -> list:
    """The paper's section as a report Section: its Markdown, and for the HTML page the
    interactive LAP histogram and bootstrap distribution (Figure III)."""
    from lookahead.pages import charts
    from lookahead.pages.blocks import Figure
    from lookahead.pages.sections import raw_section

    sec = raw_section("paper", paper_section(con, results_dir),
                      lead="The paper's Tables I-V and Figure III on this study's data; Table V is "
                           "not the contamination test (section 6 says why).")
    if sec is None:
        return []
    hist_path = Path(results_dir) / "bootstrap_histogram.csv"
    if hist_path.exists():
        hist = pd.read_csv(hist_path)
        if len(hist):
            p, draws = float(hist["p_value"].iloc[0]), int(hist["draws"].iloc[0])
            sec.items.append(Figure("bootstrap", "Figure III. Pairs bootstrap of the out-of-sample interaction",
                                    charts.bootstrap(hist, fmt_p(p, draws)), in_markdown=False))
    return [sec]
