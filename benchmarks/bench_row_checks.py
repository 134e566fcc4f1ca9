"""Benchmark: the conflicting-outcome check of row staging, grouped over shared ids only.

    python benchmarks/bench_row_checks.py STUDY_DIR [--rounds 5] [--out FILE]

Baseline: the same check grouping every valid row (lookahead.rows._conflicting as it was
at 122de87, restated here), run alternately with the current one on the rows of a study
bench_dbt_build.py generated (its observations.csv, staged once); both must flag the same
rows. Reports CPU-seconds per round (the check is single-threaded pandas) and the ratio."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import pandas as pd

from lookahead import rows
from lookahead.config import Study


def conflicting_before(row_id: pd.Series, outcome: pd.Series, reason: pd.Series) -> pd.Series:
    """The check before this round: a group-by over every valid row."""
    valid = reason.isna()
    hit = pd.Series(False, index=row_id.index)
    n_outcomes = outcome[valid].groupby(row_id[valid]).transform("nunique")
    hit[valid] = (n_outcomes > 1).to_numpy()
    return hit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study_dir", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    study = Study.from_json((a.study_dir / "vars.json").read_text())
    staged = rows.stage_observations(study.input, study.resolve(study.input.data_path))
    row_id, outcome = staged["row_id"], staged["outcome"]
    reason = staged["reject_reason"].where(~staged["reject_reason"].isin(["conflicting outcome", "duplicate row"]))
    times: dict[str, list[float]] = {"before": [], "now": []}
    for _ in range(a.rounds):
        for name, check in (("before", conflicting_before), ("now", rows._conflicting)):
            t = time.process_time()
            hit = check(row_id, outcome, reason)
            times[name].append(time.process_time() - t)
            if name == "before":
                expected = hit
            elif not hit.equals(expected):
                sys.exit("the two checks flag different rows")
    result = {
        "command": " ".join(["benchmarks/bench_row_checks.py", *sys.argv[1:]]),
        "rows": len(staged),
        "flagged": int(expected.sum()),
        "cpu_s": times,
        "median_cpu_s": {k: statistics.median(v) for k, v in times.items()},
        "ratio_now_over_before": [n / b for b, n in zip(times["before"], times["now"], strict=False)],
        "loadavg": os.getloadavg(),
    }
    print(json.dumps({k: result[k] for k in ("rows", "flagged", "median_cpu_s")}))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
