"""Table cells as REPORT.md and index.html print them: estimates with their t, p-values
through lookahead.stats.verdict's printers, and "not estimable (reason)" where the
estimator gave no number (never a number and that phrase in one cell)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from lookahead.stats.verdict import fmt_num, fmt_p, fmt_t, not_informative

#: The terms whose regressor is LAP: on a sample whose LAP has no meaningful variation
#: (lookahead.stats.verdict.collapsed_lap) they print as not informative, never as a test.
LAP_TERMS = ("lap", "mu_hat:lap")
#: The regressions those terms are estimated in.
LAP_SPECS = ("detection",)


def _flat_sd(flat: Mapping[str, float] | None, spec: str, sample: str, term: str) -> float | None:
    """The LAP sd a cell's coefficient rests on when that LAP collapsed, else None."""
    if not flat or spec not in LAP_SPECS or term not in LAP_TERMS:
        return None
    return flat.get(sample)


def fmt(x: object, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "NA"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e5 else f"{x:,.0f}"
    if pd.isna(x):
        return "NA"
    return str(x)


def num_or_nan(x: Any) -> float:  # any cell: float() decides
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def strings(df: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """Every cell as printed (fmt), in the given column order."""
    cols = list(columns or df.columns)
    return pd.DataFrame({c: [fmt(v) for v in df[c]] for c in cols}, columns=cols)


def rows_of(results: pd.DataFrame, spec: str, sample: str) -> pd.DataFrame:
    return results[(results["spec"] == spec) & (results["sample"] == sample)]


def not_estimable(row: pd.Series) -> str:
    """'not estimable (reason)' for a missing estimate, the reason from the fit's record."""
    dropped = str(row.get("dropped_terms") or "")
    if row["term"] in [x.strip() for x in dropped.split(",")]:
        return "not estimable (collinear with the fixed effects or other terms)"
    warning = str(row.get("warning") or "")
    m = warning.split("not estimable: ", 1)
    if len(m) == 2:
        return f"not estimable ({m[1].split(';')[0].strip()})"
    if "no observations" in warning:
        return "not estimable (no observations)"
    return "not estimable"


def coef_frame(
    results: pd.DataFrame,
    specs: list[tuple[str, str, str]],
    terms: list[str],
    one_sided: str | None = None,
    two_sided: bool = False,
    draws: int = 0,
    flat: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Rows: (label, spec, sample); columns per term: estimate (t); then the p-values of the
    tested term (CRV1 and wild cluster bootstrap side by side). A tested term without an
    estimate has no p; nor has one on a LAP without meaningful variation (`flat`: sample ->
    its LAP sd), which reads "not informative (LAP sd X)"."""
    lines = []
    for label, spec, sample in specs:
        part = rows_of(results, spec, sample)
        if part.empty:
            continue
        cells = []
        for term in terms:
            r = part[part["term"] == term]
            if r.empty:
                cells.append("NA")
            elif pd.isna(r["estimate"].iloc[0]):
                cells.append(not_estimable(r.iloc[0]))
            elif (sd := _flat_sd(flat, spec, sample, term)) is not None:
                cells.append(not_informative(sd))
            else:
                cells.append(f"{fmt_num(num_or_nan(r['estimate'].iloc[0]))} ({fmt_t(num_or_nan(r['t'].iloc[0]))})")
        first = part.iloc[0]
        extra = []

        def p_cells(term: str, crv: str, wild: str) -> list[str]:
            r = part[part["term"] == term]
            if r.empty or pd.isna(r["estimate"].iloc[0]) or _flat_sd(flat, spec, sample, term) is not None:
                return ["NA", "NA"]
            return [fmt_p(num_or_nan(r[crv].iloc[0])), fmt_p(num_or_nan(r[wild].iloc[0]), draws)]

        if two_sided:
            extra += p_cells(one_sided or terms[0], "p_two_sided", "p_wild_two_sided")
        if one_sided:
            extra += p_cells(one_sided, "p_one_sided", "p_wild_one_sided")
        extra += [fmt(first["n_obs"]), fmt(first["n_clusters"]), fmt(first["n_singletons"]), fmt(first["r2"], 3)]
        lines.append([label, *cells, *extra])
    head = ["sample", *[f"{t} (t)" for t in terms]]
    if two_sided:
        head += ["p (two-sided)", "wild bootstrap p (two-sided)"]
    if one_sided:
        head += [f"one-sided p ({one_sided} > 0)", "wild bootstrap one-sided p"]
    head += ["N", "clusters", "singletons dropped", "R2"]
    return pd.DataFrame(lines, columns=head)


# ---------------------------------------------------------------- publication tables

#: Readable labels of the protocol's terms (publication tables, LaTeX)
TERM_LABELS = {
    "ud": "U - D (recall direction)",
    "mu_hat": "Forecast (mu-hat)",
    "lap": "LAP",
    "mu_hat:lap": "Forecast x LAP (beta_3)",
    "ud:high_lap": "(U - D) x high LAP",
}
#: The protocol's tables: name -> (title, columns (label, spec, sample), terms)
PROTOCOL_TABLES = {
    "validation": (
        "Validation: outcome on U - D (step 3)",
        [
            ("Pooled", "validation_pooled", "pre"),
            ("High LAP", "validation_high_lap", "pre"),
            ("Low LAP", "validation_low_lap", "pre"),
            ("High minus low", "validation_difference", "pre"),
        ],
        ["ud", "ud:high_lap"],
    ),
    "detection": (
        "Detection and placebo: outcome on forecast, LAP and forecast x LAP (steps 4-5)",
        [("Pre-cutoff (detection)", "detection", "pre"), ("Post-cutoff (placebo)", "detection", "post")],
        ["mu_hat", "lap", "mu_hat:lap"],
    ),
}


def _stars(p: float) -> str:
    return "***" if p < 0.01 else "**" if p < 0.05 else "*" if p < 0.1 else ""


def publication_frame(results: pd.DataFrame, name: str, draws: int = 0, flat: Mapping[str, float] | None = None) -> pd.DataFrame:
    """A regression table as a journal prints it: a row per term with its estimate and
    stars (two-sided CRV1 p), its t-statistic in parentheses beneath, then N, clusters,
    R2 and the fixed effects; one column per regression. A coefficient on a LAP without
    meaningful variation (`flat`, as in coef_frame) reads "not informative (LAP sd X)",
    with no stars and no t."""
    _, cols, terms = PROTOCOL_TABLES[name]
    present = [(lab, sp, sa) for lab, sp, sa in cols if len(rows_of(results, sp, sa))]
    out: dict[str, list[str]] = {"": []}
    for lab, _, _ in present:
        out[lab] = []

    def add(label: str, values: list[str]) -> None:
        out[""].append(label)
        for (lab, _, _), v in zip(present, values, strict=False):
            out[lab].append(v)

    for term in terms:
        ests, ts = [], []
        for _, sp, sa in present:
            r = rows_of(results, sp, sa)
            r = r[r["term"] == term]
            if r.empty:
                ests.append("")
                ts.append("")
            elif pd.isna(r["estimate"].iloc[0]):
                ests.append("not estimable")
                ts.append("")
            elif (sd := _flat_sd(flat, sp, sa, term)) is not None:
                ests.append(not_informative(sd))
                ts.append("")
            else:
                p = num_or_nan(r["p_two_sided"].iloc[0])
                ests.append(fmt_num(num_or_nan(r["estimate"].iloc[0])) + (_stars(p) if math.isfinite(p) else ""))
                ts.append(f"({fmt_t(num_or_nan(r['t'].iloc[0]))})")
        if any(ests):
            add(TERM_LABELS.get(term, term), ests)
            add("", ts)
    firsts = [rows_of(results, sp, sa).iloc[0] for _, sp, sa in present]
    add("N", [fmt(r["n_obs"]) for r in firsts])
    add("Clusters", [fmt(r["n_clusters"]) for r in firsts])
    add("R2", [fmt(r["r2"], 3) for r in firsts])
    add("Fixed effects", [str(r.get("fixed_effects") or "") for r in firsts])
    return pd.DataFrame(out)


PUBLICATION_NOTE = (
    "t-statistics in parentheses (CRV1 clustered standard errors); * p < 0.1, "
    "** p < 0.05, *** p < 0.01, two-sided. The verdict reads the one-sided and "
    "wild-bootstrap p-values in the sections above."
)
