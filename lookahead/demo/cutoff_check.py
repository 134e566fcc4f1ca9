"""The demo's effective cutoffs against the known truth (docs/cutoff.md, "The demo").

Both demo models saw the pre-cutoff texts of the demo's window and nothing after the
build's `demo_spec.training_cutoff` (demo/models/BUILD.json), so every demo study's
`effective_cutoff` must name that month, within one month, under recall LAP and Min-K%
LAP. A study whose stated cutoff differs from it must have the stated cutoff flagged
(outside the interval) and, in `cutoff_sensitivity`, the placebo passing at the
estimated break. Prints one block per study and exits 1 when a check fails.

Run: ``lookahead demo cutoff-check --build demo/models/BUILD.json
--db outputs/demo_contaminated.duckdb --db outputs/demo_contaminated_early_cutoff.duckdb``"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pandas as pd

#: The measures whose break must match the truth (issue: recall and Min-K%).
CHECKED_MEASURES = ("recall", "mink")
TOLERANCE_MONTHS = 1


def true_month(build_json: Path) -> pd.Period:
    """The month through which the demo models saw their data (BUILD.json)."""
    spec = SimpleNamespace(**json.loads(build_json.read_text(encoding="utf-8"))["demo_spec"])
    return pd.Period(spec.training_cutoff, freq="M")


def check_database(db: Path, truth: pd.Period) -> tuple[list[str], list[str]]:
    """(lines to print, failures) for one study database."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        eff = con.sql("select * from effective_cutoff order by measure").df()
        sens = con.sql("select * from cutoff_sensitivity").df()
        recorded = con.sql("select study_name from study_settings").fetchone()
    finally:
        con.close()
    name = recorded[0] if recorded else "(no study recorded)"
    lines, failures = [f"{name} ({db}):"], []
    stated = pd.Period(pd.Timestamp(eff["stated_cutoff"].iloc[0]), freq="M")
    for _, r in eff.iterrows():
        m = str(r["measure"])
        if r["status"] == "break":
            brk = pd.Period(pd.Timestamp(r["break_month"]), freq="M")
            lo = pd.Period(pd.Timestamp(r["interval_low_month"]), freq="M")
            hi = pd.Period(pd.Timestamp(r["interval_high_month"]), freq="M")
            err = abs((brk - truth).n)
            lines.append(
                f"  {m:10s} break {brk} (95% interval {lo} to {hi}; fall {r['fall_sd']:.2f} sd; "
                f"p {r['p_fall']:.3g}); true {truth}: off by {err} month(s); stated {stated} "
                f"{'inside' if r['stated_in_interval'] else 'OUTSIDE'} the interval"
            )
            if m in CHECKED_MEASURES and err > TOLERANCE_MONTHS:
                failures.append(f"{name}: {m} break {brk} is {err} months from the true {truth}")
            if m in CHECKED_MEASURES and stated != truth and bool(r["stated_in_interval"]):
                failures.append(f"{name}: {m}: the stated cutoff {stated} is not flagged")
        else:
            lines.append(f"  {m:10s} {r['status']} (p {r['p_fall']:.3g}); true {truth}")
            if m in CHECKED_MEASURES:
                failures.append(f"{name}: {m} finds no break; true {truth}")
    for _, r in sens.iterrows():
        lines.append(
            f"  cutoff {str(r['cutoff'])[:10]} ({r['cutoff_source']}): N {r['n_pre']}/{r['n_post']}, "
            f"placebo {r['placebo_outcome']}, {r['decision']} ({r['decision_path']})"
        )
    est = sens[sens["cutoff_source"] == "estimated break"]
    if stated != truth and (est.empty or not bool(est["placebo_passes"].iloc[0])):
        failures.append(f"{name}: the placebo does not pass at the estimated break")
    return lines, failures


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description="The demo's effective cutoffs against the known truth.")
    ap.add_argument("--build", type=Path, default=Path("demo/models/BUILD.json"))
    ap.add_argument("--db", type=Path, action="append", required=True, help="a study database (repeatable)")
    args = ap.parse_args(argv)
    truth = true_month(args.build)
    print(f"== Effective training cutoff (true: the demo models saw data through {truth}) ==")
    failures: list[str] = []
    for db in args.db:
        lines, fails = check_database(db, truth)
        print("\n".join(lines))
        failures += fails
    for f in failures:
        print(f"FAILED: {f}")
    if not failures:
        print(
            f"OK: recall and Min-K% name {truth} within {TOLERANCE_MONTHS} month in every study; "
            "a wrong stated cutoff is flagged and the placebo passes at the estimated break"
        )
    return 1 if failures else 0
