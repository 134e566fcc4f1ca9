"""The paper's full analysis in one call, and the files the report quotes.

`run_paper_analysis(pre, post, settings)` fits Tables I-V (VI is Table II on a
five-level forecast: the same path, nothing to switch), runs the pairs bootstrap and
returns everything as data. `paper_long_table` is the `paper_tables` dbt model's frame;
`write_paper_assets` writes the LaTeX tables and figures next to REPORT.md and returns
the Markdown section for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lookahead.paper import bootstrap as bs
from lookahead.paper import figures, render
from lookahead.paper import tables as T
from lookahead.stats.fe_regression import NotEstimable
from lookahead.stats.verdict import fmt_p

#: Columns of `paper_tables` (python_models/marts/paper/_paper__models.yml documents each).
LONG_COLUMNS = [
    "paper_table",
    "table_column",
    "spec",
    "sample",
    "term",
    "estimate",
    "std_error",
    "t",
    "p",
    "n_obs",
    "n_clusters",
    "n_singletons",
    "n_missing",
    "dropped_terms",
    "r2",
    "r2_within",
    "fixed_effects",
    "vcov",
    "lap_measure",
    "mink_mean",
    "note",
]


@dataclass
class PaperResults:
    settings: T.PaperSections
    table1: dict[str, pd.DataFrame]
    tables: dict[str, T.PaperTable]
    bootstrap: bs.BootstrapResult | None
    notes: list[str] = field(default_factory=list)


def _has_rows(df: pd.DataFrame | None, s: T.PaperSections) -> bool:
    if df is None or len(df) == 0:
        return False
    cols = [s.outcome, s.llm, s.lap]
    return all(c in df.columns for c in cols) and df[cols].notna().all(axis=1).sum() >= 3


def run_paper_analysis(
    pre: pd.DataFrame,
    post: pd.DataFrame | None,
    settings: T.PaperSections,
    draws: int = 10_000,
    seed: int = 20240101,
    method: str = "auto",
) -> PaperResults:
    """Tables I-V and the bootstrap. Missing pieces (no moderator, no post-cutoff rows,
    no confidence measures) are skipped with a note rather than failing the analysis."""
    s, measure_note = T.paper_measure(pre, settings)
    notes: list[str] = [measure_note]
    t1 = {"pre": T.table1(pre, s)}
    if post is not None and len(post):
        t1["post"] = T.table1(post, s)
    tables: dict[str, T.PaperTable] = {}

    def attempt(name: str, build: Callable[[], T.PaperTable | None]) -> T.PaperTable | None:
        """A table the data cannot identify is skipped with a note, not a failed build."""
        try:
            return build()
        except NotEstimable as exc:
            notes.append(f"{name} not estimated: {exc}")
            return None

    t2 = attempt("Table II", lambda: T.table2(pre, s))
    if t2 is not None:
        tables["table2"] = t2
    if T.is_five_level(pre, s):
        t6 = attempt("Table VI", lambda: T.table6(pre, s))
        if t6 is not None:
            tables["table6"] = t6
    if s.paper.moderator_column is None:
        notes.append("Table III skipped: no `moderator_column` is set (a binary 0/1 column listed in `extra_columns`).")
    else:
        t3 = attempt("Table III", lambda: T.table3(pre, s))
        if t3 is not None:
            tables["table3"] = t3
    t4 = attempt("Table IV", lambda: T.table4(pre, s))
    if t4 is not None and t4.columns:
        tables["table4"] = t4
    elif t4 is not None:
        # say what happened to each measure: not in the panel, missing, or constant
        notes.append("Table IV skipped: " + " ".join(t4.notes))
    boot = None
    post, oos_note = T.out_of_sample(post, s)
    if _has_rows(post, s) and _has_rows(pre, s):
        t5 = attempt("Table V", lambda: T.table5(pre, post, s))
        if t5 is not None:
            inter = T.INTERACTION_STD
            in_est = t5.columns[1].estimate.get(inter, np.nan)
            oos_est = t5.columns[3].estimate.get(inter, np.nan)
            if draws > 0 and np.isfinite(in_est):
                y, _, full = T.table5_terms(s)
                data = bs.prepare(T.table5_inputs(post, s), y, full, s.fixed_effects)
                boot = bs.pairs_bootstrap(data, in_est, draws=draws, seed=seed, method=method, out_of_sample_estimate=oos_est)
                # one p format everywhere (fmt_p): a zero is "< 1/(B+1)" with B named
                n_draws = int(np.isfinite(boot.draws).sum())
                t5.extra_rows = {T.BOOTSTRAP_ROW: ["", "", "", f"[{fmt_p(boot.p_value, n_draws)}]"], **t5.extra_rows}
                t5.notes.append(
                    f"The paper's procedure: pairs bootstrap of the out-of-sample interaction, "
                    f"{draws:,} draws of {data.n:,} rows with replacement, seed {seed}; one-sided "
                    f"p = share of draws >= the in-sample estimate {in_est:.4g}, which it treats "
                    "as fixed (no in-sample sampling error, no clustering)."
                )
            t5.notes.append(oos_note)
            tables["table5"] = t5
    else:
        notes.append("Table V and the bootstrap skipped: they need both pre- and post-cutoff rows.")
    return PaperResults(settings=s, table1=t1, tables=tables, bootstrap=boot, notes=notes)


def paper_long_table(res: PaperResults) -> pd.DataFrame:
    """All specifications in long form (the `paper_tables` model)."""
    frames = []
    for _name, tab in res.tables.items():
        f = tab.long(res.settings)
        f["note"] = " ".join(tab.notes) if tab.notes else None
        frames.append(f)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=LONG_COLUMNS)
    for c in LONG_COLUMNS:
        if c not in out.columns:
            out[c] = None
    return out[LONG_COLUMNS]


def magnitudes_frame(res: PaperResults) -> pd.DataFrame:
    """Table II's economic magnitudes as rows (quantity, value)."""
    t2 = res.tables.get("table2")
    m = t2.magnitudes if t2 is not None else {}
    return pd.DataFrame({"quantity": list(m), "value": [float(v) for v in m.values()]})


def write_paper_assets(res: PaperResults, pre: pd.DataFrame, post: pd.DataFrame | None, out_dir: str | os.PathLike[str]) -> str:
    """Write tables/*.tex and figures/*.png under `out_dir`; return the Markdown section."""
    out = Path(out_dir)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    s = res.settings
    long = paper_long_table(res)
    md = [
        "## Paper analysis (Tables I-V, Figure III)",
        "",
        f"LAP measure: {s.lap_label}; fixed effects: {' + '.join(s.fixed_effects)}; "
        f"standard errors: clustered by {s.paper.paper_cluster} (Table VI by {T.cluster_of(s, 'table6')}, as "
        "the paper).",
        "",
    ]
    for sample, desc in res.table1.items():
        title = f"Table I. Descriptive statistics ({sample}-cutoff)"
        md += [render.markdown_descriptives(desc, title), ""]
        _write(out / "tables" / f"table1_{sample}.tex", render.latex_descriptives(desc, title))
    titles = {"table2": "Table II", "table3": "Table III", "table4": "Table IV", "table5": "Table V", "table6": "Table VI"}
    for name, tab in res.tables.items():
        title = f"{titles.get(name, name)}. {tab.title}"
        md += [render.markdown_table(long, name, title, tab.extra_rows, tab.notes), ""]
        _write(out / "tables" / f"{name}.tex", render.latex_table(long, name, title, tab.extra_rows, tab.notes))
    md += [f"_{n}_" for n in res.notes] + [""]
    figs = []
    if post is not None and len(post) and s.lap in pre.columns:
        figs.append(
            (
                "LAP before vs after the cutoff",
                figures.lap_histograms(pre, post, s.lap, out / "figures" / "lap_hist.png", s.lap_label),
            )
        )
        figs.append(
            (
                "Forecast accuracy by LAP decile",
                figures.accuracy_figure(pre, post, s.lap, out / "figures" / "accuracy_by_lap_decile.png", s.llm, s.outcome),
            )
        )
    if res.bootstrap is not None:
        b = res.bootstrap
        figs.append(
            (
                "Figure III. Pairs bootstrap of the out-of-sample interaction",
                figures.bootstrap_figure(b.draws, b.in_sample_estimate, out / "figures" / "bootstrap.png", b.p_value),
            )
        )
    for title, path in figs:
        md += [f"![{title}]({path.relative_to(out).as_posix()})", ""]
    return "\n".join(md)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["PaperResults", "magnitudes_frame", "paper_long_table", "run_paper_analysis", "write_paper_assets"]
