"""Cutoff sensitivity: the protocol's tests re-run with the cutoff moved.

Why: the verdict reads the stated `training_cutoff`; when that date is wrong, memorized
months land in the placebo sample (a cutoff too early) or clean months dilute the
detection sample (too late). This table re-splits the panel at the estimated break
(mart `effective_cutoff`, the verdict's measure) and at the stated cutoff moved by
-6, -3, +3 and +6 months, re-runs the same regressions (lookahead.stats.protocol) and
the same decision rule (lookahead.stats.verdict), and records N pre/post and the
decision path each cutoff would take. The verdict itself is not changed: a reader sees
whether the decision depends on the cutoff (docs/cutoff.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from lookahead.stats.cutoff import as_date
from lookahead.stats.protocol import StatsSections, infeasible_sample, run_protocol, run_sample
from lookahead.stats.verdict import PATHS, PLACEBO, evaluate, gather_facts

#: Shifts of the stated cutoff, in months (0 is the stated cutoff itself, for reference).
SHIFTS = (-6, -3, 0, 3, 6)
STATED, ESTIMATED = "stated", "estimated break"

SENSITIVITY_COLUMNS = (
    "cutoff_source",
    "shift_months",
    "cutoff",
    "n_pre",
    "n_post",
    "beta3",
    "beta3_t",
    "beta3_p_one_sided",
    "beta3_p_source",
    "validation_pattern",
    "validation_failures",
    "placebo_beta3",
    "placebo_p_one_sided",
    "placebo_outcome",
    "placebo_passes",
    "decision",
    "decision_path",
    "decision_path_meaning",
    "is_stated",
)


def shifted(stated: str, months: int) -> pd.Timestamp:
    """The stated cutoff moved by `months` calendar months; a month-end stays a month-end."""
    t = pd.Timestamp(stated)
    if t.is_month_end:
        return (t.to_period("M") + months).to_timestamp(how="end").normalize()
    return t + pd.DateOffset(months=months)


def split(panel: pd.DataFrame, cutoff: pd.Timestamp, rule: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pre, post) at `cutoff` (target_date <= cutoff is pre), each with high_lap recomputed
    within its sample by the study's rule, as the `panel` model does in SQL."""
    dates = pd.to_datetime(panel["target_date"])
    out = []
    for part in (panel.loc[dates <= cutoff], panel.loc[dates > cutoff]):
        part = part.copy()
        lap = pd.to_numeric(part["lap"], errors="coerce").astype(float)
        if rule == "entity_mean_median":
            ent = lap.groupby(part["entity_id"]).transform("mean")
            med = lap.groupby(part["entity_id"]).mean().median()
            high = ent > med
        else:
            high = lap > lap.median()
        part["high_lap"] = high.fillna(False).astype(int)
        out.append(part.reset_index(drop=True))
    return out[0], out[1]


def evaluate_at(panel: pd.DataFrame, cutoff: pd.Timestamp, rule: str, settings: StatsSections) -> dict[str, Any]:
    """The rule's outcome with the panel split at `cutoff`."""
    pre, post = split(panel, cutoff, rule)
    if len(pre) == 0:
        results = pd.concat(
            [infeasible_sample("pre", settings, "no pre-cutoff rows at this cutoff"), _post_only(post, settings)],
            ignore_index=True,
        )
    else:
        results = run_protocol(pre, post, settings)
    o = evaluate(gather_facts(results, pre, post, settings))
    b3, plc = o.tests["beta3"], o.tests["placebo"]
    return {
        "cutoff": cutoff.date(),
        "n_pre": len(pre),
        "n_post": len(post),
        "beta3": b3.estimate,
        "beta3_t": b3.t,
        "beta3_p_one_sided": b3.p,
        "beta3_p_source": b3.source,
        "validation_pattern": o.validation_present,
        "validation_failures": ",".join(o.validation_failures),
        "placebo_beta3": plc.estimate,
        "placebo_p_one_sided": plc.p,
        "placebo_outcome": o.placebo,
        "placebo_passes": bool(_placebo_ok(o.placebo)),
        "decision": o.decision,
        "decision_path": o.path,
        "decision_path_meaning": PATHS[o.path][1],
    }


def _post_only(post: pd.DataFrame, settings: StatsSections) -> pd.DataFrame:
    """The placebo regressions alone (no pre-cutoff rows at this cutoff)."""
    return run_sample(post, "post", settings) if len(post) else infeasible_sample("post", settings, "no rows")


def _placebo_ok(code: str) -> bool:
    return PLACEBO[code][0]


def sensitivity_frame(panel: pd.DataFrame, stated: str, estimated: object, rule: str, settings: StatsSections) -> pd.DataFrame:
    """One row per cutoff: the stated one moved by SHIFTS months, then the estimated break
    (`estimated`: the effective_cutoff date under the verdict's measure, or None)."""
    cutoffs: list[tuple[str, int | None, pd.Timestamp]] = [
        (STATED if s == 0 else f"stated {s:+d} months", s, shifted(stated, s)) for s in SHIFTS
    ]
    if estimated is not None and not (isinstance(estimated, float) and math.isnan(estimated)) and not pd.isna(estimated):
        est = pd.Timestamp(estimated)
        diff = (est.to_period("M") - pd.Timestamp(stated).to_period("M")).n
        cutoffs.append((ESTIMATED, diff, est))
    rows = []
    for source, shift, cut in cutoffs:
        row = {"cutoff_source": source, "shift_months": shift, "is_stated": source == STATED}
        row.update(evaluate_at(panel, cut, rule, settings))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(SENSITIVITY_COLUMNS))
    for c in ("beta3", "beta3_t", "beta3_p_one_sided", "placebo_beta3", "placebo_p_one_sided"):
        frame[c] = pd.array([v if np.isfinite(v) else None for v in frame[c].astype(float)], dtype="Float64")
    frame["cutoff"] = as_date(frame["cutoff"])
    return frame


def build_frame(panel_relation: object, settings_frame: pd.DataFrame, effective: pd.DataFrame) -> pd.DataFrame:
    """cutoff_sensitivity for a dbt build: the whole panel (the columns the regressions and
    the verdict read), the study's settings and the effective_cutoff mart."""
    from lookahead.stats.panel_io import read_columns
    from lookahead.stats.protocol import protocol_columns, study_from_frame
    from lookahead.stats.verdict import VERDICT_COLUMNS

    study = study_from_frame(settings_frame)
    settings = StatsSections.from_study(study)
    cols = [*protocol_columns(settings), *VERDICT_COLUMNS, "entity_id", "target_date"]
    panel = read_columns(panel_relation, cols)
    sel = effective[effective["measure"] == settings.measures.lap_measure]
    estimated = None
    if len(sel) and str(sel["status"].iloc[0]) == "break":
        estimated = sel["effective_cutoff"].iloc[0]
    return sensitivity_frame(panel, str(study.protocol.training_cutoff), estimated, str(study.protocol.high_lap_rule), settings)
