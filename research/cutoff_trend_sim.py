"""Simulation: the effective-cutoff break test against a trend (lookahead/stats/cutoff.py).

Why: a month-permutation test of a mean shift called a steady decline of LAP a break in
every series (older texts better memorized is common in real corpora). The break is now a
level shift tested with a linear trend under the null; this checks, on series with a known
truth, that

  * a linear decline with no break (1 sd over 36 months, 30 entities) is called a break in
    at most 10% of 200 series, and reported as a steady decline instead;
  * a fall of 1 sd is found in at least 95% of 200 series with its month (the 95% interval
    covers the true month), and a fall of 0.2 sd in at least 80%;
  * the interval covers the true month with few entities (10) and a weak fall.

Each series: entities x 36 months, a Poisson(10) number of rows per entity and month
(Poisson(4) in one scenario, to show where a 0.2 sd fall stops being found), row LAP =
level(month) + entity effect N(0, 0.3^2) + noise N(0, 0.95^2), so a row's sd within a
month is 1 (the unit of "sd" below). The true break month (the last
month of the high regime) is drawn uniformly from months 9 to 26 of 36 (index 8..25).
The rows go through ``cells`` and ``effective_cutoff_row`` exactly as the mart builds them.

    PYTHONPATH=. .venv/bin/python -m research.cutoff_trend_sim [--series 200]
        [--out benchmarks/results/cutoff_trend_sim.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lookahead.stats import cutoff as C

MONTHS = pd.date_range("2019-01-01", periods=36, freq="MS")


@dataclass(frozen=True)
class Scenario:
    name: str
    n_entities: int = 30
    fall_sd: float = 0.0  # level shift after the break month (0: no break)
    trend_sd: float = 0.0  # total linear decline over the 36 months, in sd
    rows_per_cell: float = 10.0


SCENARIOS = (
    Scenario("linear_decline_no_break", trend_sd=1.0),
    Scenario("no_trend_no_break"),
    Scenario("fall_1sd", fall_sd=1.0),
    Scenario("fall_0.2sd", fall_sd=0.2),
    Scenario("fall_0.2sd_4_rows_per_cell", fall_sd=0.2, rows_per_cell=4.0),
    Scenario("fall_1sd_on_a_decline", fall_sd=1.0, trend_sd=1.0),
    Scenario("fall_0.2sd_10_entities", n_entities=10, fall_sd=0.2),
    Scenario("fall_0.5sd_10_entities", n_entities=10, fall_sd=0.5),
)


def series(rng: np.random.Generator, s: Scenario) -> tuple[pd.DataFrame, int | None]:
    """Rows (entity_id, target_date, lap) and the true break index (None: no break)."""
    k = int(rng.integers(8, 26)) if s.fall_sd > 0 else None
    j = np.arange(len(MONTHS))
    level = 2.0 - s.trend_sd * j / (len(MONTHS) - 1)
    if k is not None:
        level = level - s.fall_sd * (j > k)
    counts = rng.poisson(s.rows_per_cell, (s.n_entities, len(MONTHS)))
    e, m = np.nonzero(counts)
    reps = counts[e, m]
    e, m = np.repeat(e, reps), np.repeat(m, reps)
    lap = level[m] + rng.normal(0, 0.3, s.n_entities)[e] + rng.normal(0, 0.95, len(e))
    day = rng.integers(0, 28, len(e))
    df = pd.DataFrame({"entity_id": [f"E{x:03d}" for x in e], "target_date": MONTHS[m] + pd.to_timedelta(day, "D"), "lap": lap})
    return df, k


def one(rng: np.random.Generator, s: Scenario) -> dict:
    df, k = series(rng, s)
    entities = sorted(df["entity_id"].unique())
    c = C.cells(df, "lap", entities)
    row = C.effective_cutoff_row(c, np.zeros((0, len(entities))), "2020-12-31")
    out = {
        "status": row["status"],
        "p_fall": row["p_fall"],
        "trend_per_month": row["trend_per_month"],
        "true_k": k,
        "k": None,
        "covered": None,
        "half_width": row["interval_half_width"],
    }
    if row["status"] == C.BREAK:
        est = int(c.months.get_loc(pd.Timestamp(row["break_month"])))
        lo = int(c.months.get_loc(pd.Timestamp(row["interval_low_month"])))
        hi = int(c.months.get_loc(pd.Timestamp(row["interval_high_month"])))
        out.update({"k": est, "covered": bool(k is not None and lo <= k <= hi)})
    return out


def summarize(rows: list[dict]) -> dict:
    r = len(rows)
    brk = [x for x in rows if x["status"] == C.BREAK]
    share = lambda n: n / r  # noqa: E731
    mcse = lambda p: math.sqrt(p * (1 - p) / r)  # noqa: E731
    found_month = sum(1 for x in brk if x["covered"])
    exact = sum(1 for x in brk if x["true_k"] is not None and x["k"] == x["true_k"])
    out = {
        "series": r,
        "break": share(len(brk)),
        "break_mcse": mcse(share(len(brk))),
        "steady_decline": share(sum(x["status"] == C.DECLINE for x in rows)),
        "no_significant_fall": share(sum(x["status"] == C.NO_FALL for x in rows)),
        "found_with_month": share(found_month),
        "found_with_month_mcse": mcse(share(found_month)),
        "exact_month": share(exact),
        "coverage_given_break": (found_month / len(brk)) if brk else math.nan,
        "median_half_width": float(np.median([x["half_width"] for x in brk])) if brk else math.nan,
    }
    if brk:
        out["median_break_month_index"] = float(np.median([x["k"] for x in brk]))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    ap.add_argument("--out", default="benchmarks/results/cutoff_trend_sim.json")
    a = ap.parse_args(argv)
    wanted = [x for x in a.scenarios.split(",") if x]
    t0 = time.perf_counter()
    result = {
        "command": "python -m research.cutoff_trend_sim " + " ".join(argv if argv is not None else sys.argv[1:]),
        "null_draws": C.NULL_DRAWS,
        "alpha": C.ALPHA_FALL,
        "bai_c": C.BAI_C,
        "scenarios": {},
    }
    for i, s in enumerate(SCENARIOS):
        if s.name not in wanted:
            continue
        rng = np.random.default_rng([a.seed, i])
        rows = [one(rng, s) for _ in range(a.series)]
        summ = summarize(rows)
        result["scenarios"][s.name] = {"design": asdict(s), **summ}
        print(s.name, json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summ.items()}), flush=True)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["cpus"] = os.cpu_count()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
