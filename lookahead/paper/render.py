"""Regression tables printed the way finance papers print them, as Markdown and LaTeX.

Input is the long result frame (`paper_tables`: one row per table, column, term), so the
report can render straight from the DuckDB table. Layout follows the paper: coefficient
with stars (*** p<0.01, ** p<0.05, * p<0.10, two-sided), t-statistic in parentheses
below, then fixed-effect rows, extra rows (e.g. the bootstrap p-value), R2 and N.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import pandas as pd

from lookahead.safe_output import strip_controls

FE_LABELS = {"entity_num": "Entity FE", "period_num": "Period FE", "target_date": "Date FE"}

#: Row order of Table IV as the paper prints it (LAP terms before the confidence measures).
TERM_ORDER = {
    "table4": ["LLM", "LAP", "LLM x LAP", "p(first token)", "LLM x p(first token)", "Confidence", "LLM x Confidence"],
}


def stars(p: float) -> str:
    if p is None or not math.isfinite(p):
        return ""
    return "***" if p < 0.01 else "**" if p < 0.05 else "*" if p < 0.10 else ""


def fmt_coef(x: float) -> str:
    """Three decimals, or three significant digits for small numbers (0.00117), as the paper."""
    if x is None or not math.isfinite(x):
        return ""
    if x == 0 or abs(x) >= 0.1:
        return f"{x:.3f}"
    return f"{x:#.3g}" if abs(x) >= 1e-4 else f"{x:.2e}"


def _ordered_terms(t: pd.DataFrame, name: str) -> list[str]:
    seen = list(dict.fromkeys(t.sort_values(["table_column"], kind="stable")["term"]))
    order = TERM_ORDER.get(name)
    if not order:
        return seen
    rank = {term: i for i, term in enumerate(order)}
    return sorted(seen, key=lambda x: (rank.get(x, len(order)), seen.index(x)))


def table_cells(
    long: pd.DataFrame, table: str, extra_rows: Mapping[str, Sequence[str]] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Header and body cells of one table (shared by the Markdown and LaTeX writers)."""
    t = long[long["paper_table"] == table]
    if t.empty:
        raise KeyError(f"no rows for table '{table}' in the result frame")
    cols = sorted(t["table_column"].unique())
    header = [""] + [f"({c})" for c in cols]
    body: list[list[str]] = []
    for term in _ordered_terms(t, table):
        coef, tstat = [term], [""]
        for c in cols:
            r = t[(t["table_column"] == c) & (t["term"] == term)]
            if r.empty:
                coef.append("")
                tstat.append("")
                continue
            if not math.isfinite(float(r["estimate"].iloc[0])):
                dropped = str(r["dropped_terms"].iloc[0] or "") if "dropped_terms" in r else ""
                why = "collinear" if term in [x.strip() for x in dropped.split(",")] else "no estimate"
                coef.append(f"not estimable ({why})")
                tstat.append("")
                continue
            r = r.iloc[0]
            coef.append(fmt_coef(float(r["estimate"])) + stars(float(r["p"])))
            tstat.append(f"({float(r['t']):.2f})" if math.isfinite(float(r["t"])) else "")
        body += [coef, tstat]
    first = t.groupby("table_column").first()
    fes = list(dict.fromkeys(fe for v in first["fixed_effects"] for fe in str(v).split("+") if fe))
    for fe in fes:
        body.append(
            [FE_LABELS.get(fe, f"{fe} FE")]
            + ["Yes" if fe in str(first.loc[c, "fixed_effects"]).split("+") else "No" for c in cols]
        )
    for label, vals in (extra_rows or {}).items():
        body.append([label] + [str(v) for v in vals])
    body.append(["R2"] + [f"{float(first.loc[c, 'r2']):.3f}" for c in cols])
    body.append(["N"] + [f"{int(first.loc[c, 'n_obs']):,}" for c in cols])
    if "vcov" in first:
        body.append(["SE"] + [str(first.loc[c, "vcov"]) for c in cols])
    return header, body


def markdown_table(
    long: pd.DataFrame,
    table: str,
    title: str = "",
    extra_rows: Mapping[str, Sequence[str]] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """A GitHub-Markdown rendering for REPORT.md."""
    header, body = table_cells(long, table, extra_rows)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = [f"**{title}**", ""] if title else []
    lines.append("| " + " | ".join(esc(h) for h in header) + " |")
    lines.append("|" + "---|" + "---:|" * (len(header) - 1))
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    lines += [""] + [f"_{n}_" for n in notes] if notes else []
    lines.append("")
    lines.append("t-statistics in parentheses; *** p<0.01, ** p<0.05, * p<0.10 (two-sided).")
    return "\n".join(lines) + "\n"


_LATEX_ESC = {
    "\\": r"\textbackslash{}",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "_": r"\_",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\^{}",
}


def latex_escape(s: str) -> str:
    """LaTeX text: special characters escaped, control bytes removed and line breaks made
    spaces (a blank line would end the table's paragraph)."""
    s = re.sub(r"\s*[\r\n]+\s*", " ", strip_controls(s))
    out = "".join(_LATEX_ESC.get(ch, ch) for ch in s)
    return out.replace(" x ", r" $\times$ ")


def _latex_stars(cell: str) -> str:
    n = len(cell) - len(cell.rstrip("*"))
    return cell[: len(cell) - n] + ("$^{" + "*" * n + "}$" if n else "")


def latex_table(
    long: pd.DataFrame,
    table: str,
    title: str = "",
    extra_rows: Mapping[str, Sequence[str]] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """A standalone LaTeX `table` (booktabs) that \\input{}s into a paper."""
    header, body = table_cells(long, table, extra_rows)
    n = len(header) - 1
    out = [r"\begin{table}[htbp]", r"\centering"]
    if title:
        out.append(r"\caption{" + latex_escape(title) + "}")
    out += [r"\begin{tabular}{l" + "c" * n + "}", r"\toprule", " & ".join(header) + r" \\", r"\midrule"]
    for i, row in enumerate(body):
        label = "$R^2$" if row[0] == "R2" else latex_escape(row[0])
        cells = [label] + [_latex_stars(latex_escape(c)) for c in row[1:]]
        if row[0].endswith("FE") and (i == 0 or not body[i - 1][0].endswith("FE")):
            out.append(r"\midrule")
        out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    foot = [*list(notes), "t-statistics in parentheses; *** p<0.01, ** p<0.05, * p<0.10."]
    out.append(r"\par\footnotesize " + " ".join(latex_escape(x) for x in foot))
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


DESC_COLS = ["mean", "sd", "p10", "p25", "median", "p75", "p90", "n"]


def _desc_cells(desc: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["Variable", "Mean", "SD", "P10", "P25", "Median", "P75", "P90", "N"]
    body = []
    for _, r in desc.iterrows():
        if not r.get("n"):
            continue
        body.append([str(r["variable"])] + [f"{float(r[c]):.3f}" for c in DESC_COLS[:-1]] + [f"{int(r['n']):,}"])
    return header, body


def markdown_descriptives(desc: pd.DataFrame, title: str = "") -> str:
    """Table I as Markdown."""
    header, body = _desc_cells(desc)
    lines = [f"**{title}**", ""] if title else []
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "---:|" * (len(header) - 1))
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def latex_descriptives(desc: pd.DataFrame, title: str = "") -> str:
    """Table I as LaTeX."""
    header, body = _desc_cells(desc)
    out = [r"\begin{table}[htbp]", r"\centering"]
    if title:
        out.append(r"\caption{" + latex_escape(title) + "}")
    out += [r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}", r"\toprule", " & ".join(header) + r" \\", r"\midrule"]
    out += [" & ".join(latex_escape(c) for c in r) + r" \\" for r in body]
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out) + "\n"
