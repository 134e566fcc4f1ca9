"""The report's effective-cutoff words and tables, rendered from the exported CSVs of the
marts `effective_cutoff`, `lap_by_period` and `cutoff_sensitivity` (docs/cutoff.md).

Two pieces: the warning that stands in the verdict paragraph when the stated cutoff lies
outside the break's interval under the verdict's measure (a warning beside the decision
rule, which still reads the stated cutoff), and the section with the three tables."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from lookahead.config import Study
from lookahead.measures import MEASURES
from lookahead.stats.cutoff import BREAK, DECLINE, DECLINE_TEXT, EXPOSURE_NOTE, NO_FALL, cutoff_warning
from lookahead.stats.verdict import fmt_num, fmt_p


def _read(results_dir: Path, name: str) -> pd.DataFrame:
    path = results_dir / f"{name}.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def _month(x: object) -> str:
    return "NA" if x is None or (isinstance(x, float) and math.isnan(x)) else pd.Timestamp(x).strftime("%Y-%m")


def _selected(eff: pd.DataFrame, measure: str) -> pd.Series | None:
    sel = eff[eff["measure"] == measure] if len(eff) else eff
    return sel.iloc[0] if len(sel) else None


def verdict_warning(results_dir: Path, study: Study) -> str:
    """The verdict paragraph's warning ("" when the stated cutoff is inside the interval,
    when no significant fall was found, or when the build has no effective_cutoff)."""
    row = _selected(_read(results_dir, "effective_cutoff"), study.measures.lap_measure)
    if row is None:
        return ""
    text = cutoff_warning(row, str(study.protocol.training_cutoff), MEASURES[study.measures.lap_measure].short)
    return text + "\n\n" if text else ""


def _interval(r: pd.Series) -> str:
    if str(r["status"]) != BREAK:
        return "-"
    lo, hi = _month(r["interval_low_month"]), _month(r["interval_high_month"])
    return lo if lo == hi else f"{lo} to {hi}"


def _inside(r: pd.Series) -> str:
    if str(r["status"]) != BREAK:
        return "-"
    return "yes" if str(r["stated_in_interval"]).strip().lower() in ("true", "1") else "**no**"


def cutoff_section(results_dir: Path, study: Study, number: str = "7") -> str:
    """The effective-cutoff section: the break per measure, LAP by month under the
    verdict's measure, and the cutoff sensitivity table ("" when the build has none)."""
    eff = _read(results_dir, "effective_cutoff")
    lbp = _read(results_dir, "lap_by_period")
    sens = _read(results_dir, "cutoff_sensitivity")
    if not len(eff):
        return ""
    measure = study.measures.lap_measure
    stated = str(study.protocol.training_cutoff)
    md = [
        f"\n## {number}. Effective training cutoff\n\n",
        f"The stated training cutoff is {stated}. Where the model's knowledge ends is read from "
        "the study's own LAP by realization month: a level shift (a fall) against a linear "
        "trend in the monthly series (Bai 1994), tested with the trend in both models against "
        "a bootstrap of the trend without a break, so a steady decline is not read as a "
        "cutoff, and Bai (1997)'s 95% interval for the break month (docs/cutoff.md). The break "
        "month is the last month of the high-LAP regime. A month is named only when the fall "
        "is significant (p < 0.05).\n\n",
    ]
    rows: list[tuple[str, ...]] = []  # the effective cutoff table now, the sensitivity table below
    for _, r in eff.iterrows():
        name = f"`{r['measure']}`" + (" (verdict)" if str(r["is_selected_measure"]).lower() in ("true", "1") else "")
        brk = _month(r["break_month"]) if str(r["status"]) == BREAK else "-"
        rows.append(
            (name, str(r["status"]), brk, _interval(r), fmt_num(float(r["fall_sd"]), 3), fmt_p(float(r["p_fall"])), _inside(r))
        )
    md.append(
        _table(
            rows,
            [
                "LAP measure",
                "finding",
                "break month",
                "95% interval",
                "fall (sd of pre-break LAP)",
                "p (fall beyond the trend)",
                f"{stated} inside",
            ],
        )
    )
    sel = _selected(eff, measure)
    if sel is not None:
        short = MEASURES[measure].short
        if str(sel["status"]) == BREAK:
            inside = str(sel["stated_in_interval"]).strip().lower() in ("true", "1")
            md.append(
                f"\nUnder the verdict's measure ({short}) LAP falls after {_month(sel['break_month'])} "
                f"by {fmt_num(float(sel['fall_sd']), 3)} sd of pre-break LAP (mean "
                f"{fmt_num(float(sel['mean_before']))} before, {fmt_num(float(sel['mean_after']))} after); "
                f"the stated cutoff's month {_month(sel['stated_cutoff_month'])} lies "
                f"{'inside' if inside else 'outside'} the interval ({_interval(sel)}). "
                f"{EXPOSURE_NOTE}\n"
            )
        elif str(sel["status"]) == DECLINE:
            md.append(
                f"\nUnder the verdict's measure ({short}): {DECLINE_TEXT} (slope "
                f"{fmt_num(float(sel['trend_per_month']))} per month, two-sided p "
                f"{fmt_p(float(sel['trend_p']))}; no fall beyond the trend, p "
                f"{fmt_p(float(sel['p_fall']))}). No month is named: a gradual decline "
                "is not a training cutoff, and the stated cutoff can be neither confirmed "
                "nor contradicted from the data.\n"
            )
        elif str(sel["status"]) == NO_FALL:
            md.append(
                f"\nUnder the verdict's measure ({short}) LAP shows no significant fall "
                f"(p {fmt_p(float(sel['p_fall']))}); no month is named, and the "
                "stated cutoff can be neither confirmed nor contradicted from the data.\n"
            )
        else:
            md.append(f"\nUnder the verdict's measure ({short}) the series has too few months to fit a break.\n")
    if len(lbp):
        part = lbp[lbp["measure"] == measure]
        if len(part):
            md.append(f"\nLAP by realization month ({MEASURES[measure].short}; every measure in `lap_by_period.csv`):\n\n")
            md.append(
                _table(
                    [
                        (
                            str(r["month_label"]),
                            "post" if str(r["after_stated_cutoff"]).lower() in ("true", "1") else "pre",
                            str(int(r["n"])),
                            fmt_num(float(r["mean"])),
                            fmt_num(float(r["trimmed_mean"])),
                            f"{fmt_num(float(r['ci_low']))} to {fmt_num(float(r['ci_high']))}",
                        )
                        for _, r in part.iterrows()
                    ],
                    ["month", "sample (stated cutoff)", "n", "mean", "10% trimmed mean", "95% entity-bootstrap interval"],
                )
            )
    if len(sens):
        draws = int(study.protocol.wild_bootstrap_draws)
        md.append(
            "\nCutoff sensitivity: the same regressions and decision rule with the cutoff "
            "moved (the verdict above reads the stated cutoff):\n\n"
        )
        rows = []
        for _, r in sens.iterrows():
            d = draws  # an exact 0 can only be a bootstrap p: printed as < 1/(B+1)
            plc = str(r["placebo_outcome"])
            if plc in ("passes", "fails") and pd.notna(r["placebo_p_one_sided"]):
                plc += f" (p {fmt_p(float(r['placebo_p_one_sided']), d)})"
            rows.append(
                (
                    str(r["cutoff_source"]),
                    str(r["cutoff"])[:10],
                    str(int(r["n_pre"])),
                    str(int(r["n_post"])),
                    fmt_num(float(r["beta3"])),
                    fmt_p(float(r["beta3_p_one_sided"]), d),
                    "present" if str(r["validation_pattern"]).lower() in ("true", "1") else "absent",
                    plc,
                    f"{r['decision']} (`{r['decision_path']}`)",
                )
            )
        md.append(
            _table(
                rows,
                [
                    "cutoff",
                    "date",
                    "N pre",
                    "N post",
                    "beta_3",
                    "one-sided p",
                    "validation pattern",
                    "placebo",
                    "decision (path)",
                ],
            )
        )
        decisions = sens["decision"].astype(str)
        stated_row = sens[sens["is_stated"].astype(str).str.lower().isin(("true", "1"))]
        if len(stated_row):
            same = int((decisions == str(stated_row["decision"].iloc[0])).sum())
            md.append(
                f"\n{same} of {len(sens)} cutoffs give the decision reached at the stated cutoff "
                f"({stated_row['decision'].iloc[0]}).\n"
            )
    return "".join(md)


def _table(rows: list[tuple[str, ...]], columns: list[str]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "|".join("---" for _ in columns) + "|\n"
    return head + "".join("| " + " | ".join(r) + " |\n" for r in rows)
