"""How the paper's Table V reads beside the verdict, rendered from Table V's numbers.

Table V compares the standardized LLM x LAP interaction in-sample (before the cutoff) with
out-of-sample (after it). Readers take a significant out-of-sample interaction, or a small
bootstrap p, for a verdict on contamination; it is not one. The report writes the
numbers to ``table5_reading.csv`` (results folder; its name in lookahead.report_names) and REPORT.md's verdict section renders
this explanation from that file, so the words follow the numbers of each study."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

ALPHA = 0.05
INTERACTION = "LLM_std x LAP_std"


def _num(x: Any) -> float:  # any cell: float() decides
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def reading_frame(long: pd.DataFrame, draws: int = 0) -> pd.DataFrame:
    """One row of Table V's facts from the `paper_tables` long table (empty without Table V)."""
    t5 = long[long["paper_table"] == "table5"]
    coef = t5[(t5["kind"] == "coefficient") & (t5["term"] == INTERACTION)]
    if coef.empty:
        return pd.DataFrame()
    by_col = {int(r.table_column): r for r in coef.itertuples()}
    ins, out = by_col.get(2), by_col.get(4)
    boot = long[long["kind"] == "bootstrap"]
    diff = long[long["kind"] == "difference"]
    row = {
        "in_sample": _num(getattr(ins, "estimate", None)),
        "in_sample_t": _num(getattr(ins, "t", None)),
        "in_sample_p": _num(getattr(ins, "p", None)),
        "out_of_sample": _num(getattr(out, "estimate", None)),
        "out_of_sample_t": _num(getattr(out, "t", None)),
        "out_of_sample_p": _num(getattr(out, "p", None)),
        "bootstrap_p": _num(boot["p"].iloc[0]) if len(boot) else math.nan,
        "bootstrap_draws": int(draws),  # B behind the bootstrap p: a zero prints as < 1/(B+1)
        "difference": _num(diff["estimate"].iloc[0]) if len(diff) else math.nan,
        "difference_p_one_sided": _num(diff["p"].iloc[0]) if len(diff) else math.nan,
    }
    return pd.DataFrame([row])


def _draws(row: pd.Series) -> int:
    """B of the bootstrap p (0 when the row predates the column: the p prints as it is)."""
    b = _num(row.get("bootstrap_draws"))
    return int(b) if math.isfinite(b) else 0


def _sig(p: float) -> bool:
    return math.isfinite(p) and p < ALPHA


def table5_reading(row: pd.Series) -> str:
    """The paragraph beside the verdict: what Table V is, why it is not the contamination
    test, and what its out-of-sample interaction means here."""
    from lookahead.stats.verdict import fmt_num, fmt_p, fmt_t

    ins, ins_t, ins_p = _num(row.get("in_sample")), _num(row.get("in_sample_t")), _num(row.get("in_sample_p"))
    out, out_t, out_p = (_num(row.get("out_of_sample")), _num(row.get("out_of_sample_t")), _num(row.get("out_of_sample_p")))
    boot, diff, diff_p = (_num(row.get("bootstrap_p")), _num(row.get("difference")), _num(row.get("difference_p_one_sided")))
    text = [
        "**How the paper's Table V relates to this verdict.** Table V (paper section below) "
        "compares the standardized LLM x LAP interaction in-sample, before the training cutoff "
        f"({fmt_num(ins)}, t {fmt_t(ins_t)}, two-sided p {fmt_p(ins_p)}), with out-of-sample, "
        f"after it ({fmt_num(out)}, t {fmt_t(out_t)}, two-sided p {fmt_p(out_p)}), each period "
        "standardized on its own. Its bootstrap p "
        f"({fmt_p(boot, _draws(row))}) is the share of out-of-sample bootstrap draws that reach the "
        "in-sample estimate, which it treats as fixed; the stacked regression tests in-sample "
        f"minus out-of-sample ({fmt_num(diff)}, clustered one-sided p {fmt_p(diff_p)}). It is "
        "not the contamination test: the verdict rests on the protocol's beta_3 together with "
        "the validation pattern and the placebo (sections 3-5), and a small Table V p-value "
        "says only that the two periods differ, not that the in-sample interaction is positive."
    ]
    if _sig(out_p) and out > 0:
        text.append(
            " Here the out-of-sample interaction is significantly positive: after the cutoff, "
            "where memorization is impossible, high-LAP forecasts are still more accurate, so "
            "LAP also measures something other than memorization (how familiar or predictable "
            "the entity is), and a pre-cutoff interaction is weaker evidence of leakage."
        )
    elif _sig(out_p) and out < 0:
        text.append(
            " Here the out-of-sample interaction is significantly negative: after the cutoff, "
            "high-LAP forecasts are less accurate (confidence on familiar names without the "
            "answer). Memorization cannot produce that, and the placebo's one-sided test for a "
            "surviving positive effect does not count it against the model."
        )
    elif math.isfinite(out_p):
        text.append(f" Here the out-of-sample interaction is not significant (two-sided p {fmt_p(out_p)}, not below {ALPHA:g}).")
    if _sig(boot) and not (_sig(ins_p) and ins > 0):
        text.append(
            f" The bootstrap p is small although the in-sample interaction is not significantly "
            f"positive (two-sided p {fmt_p(ins_p)}): the out-of-sample draws fall short of an "
            f"in-sample estimate of {fmt_num(ins)} because the out-of-sample interaction is "
            f"{fmt_num(out)}, not because the in-sample one is large."
        )
    return "".join(text)
