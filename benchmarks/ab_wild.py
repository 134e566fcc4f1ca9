"""Side by side: the five verdict bootstraps at 91,361 rows and 1,587 clusters, this tree
against another checkout of the package, alternating in fresh processes so machine load
hits both alike.

Why: the draws are re-projected off the fixed effects crossed with the clusters
(lookahead/stats/wild.py); this measures what that costs where it matters most, at the
paper's scale (bench_wild.py's panel, 999 Webb draws, the same seed).

    PYTHONPATH=. .venv/bin/python benchmarks/ab_wild.py --other /path/to/checkout
        [--rounds 3] [--out benchmarks/results/ab_wild.json]

One round runs each tree once (order alternating); each run times ``time_fast`` of
bench_wild.py on the same panel and reports the sum over the five regressions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ONE_RUN = f"""
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {str(HERE)!r})
from bench_wild import make_panel, split, verdict_regressions, time_fast
from lookahead.stats.protocol import StatsSections
s = StatsSections.with_defaults(
    cluster="entity", lap_measure="recall", wild_bootstrap_draws=999, wild_bootstrap_weights="webb", wild_bootstrap_seed=20240101
)
wild = s.protocol
df = make_panel(91_361, 1_587, 36, 1)
pre, post = split(df, 36)
regs = verdict_regressions(pre, post, s)
time_fast(regs[:1], wild)  # warm the demeaner
out = time_fast(regs, wild)
print(json.dumps({{"total_s": sum(v["total_s"] for v in out.values()),
                  "per_regression": out}}))
"""


def run(tree: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run([sys.executable, "-c", ONE_RUN], env=env, capture_output=True, text=True, check=True, cwd=str(tree))
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", required=True, help="checkout to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/ab_wild.json")
    a = ap.parse_args()
    this, other = HERE.parent, Path(a.other).resolve()
    rows = []
    for r in range(a.rounds):
        order = [("this", this), ("other", other)] if r % 2 == 0 else [("other", other), ("this", this)]
        for name, tree in order:
            res = run(tree)
            rows.append(
                {
                    "round": r,
                    "tree": name,
                    "total_s": res["total_s"],
                    "per_regression": res["per_regression"],
                    "load": os.getloadavg(),
                }
            )
            print(f"round {r} {name}: {res['total_s']:.2f} s", flush=True)
    med = {n: sorted(x["total_s"] for x in rows if x["tree"] == n)[a.rounds // 2] for n in ("this", "other")}
    result = {
        "command": "python benchmarks/ab_wild.py " + " ".join(sys.argv[1:]),
        "other": str(other),
        "cpus": os.cpu_count(),
        "median_s": med,
        "this_over_other": med["this"] / med["other"],
        "runs": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"median: this {med['this']:.2f} s, other {med['other']:.2f} s, ratio {med['this'] / med['other']:.2f}")


if __name__ == "__main__":
    main()
