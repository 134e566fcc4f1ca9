#!/bin/sh
# The full-verdict Monte Carlo of docs/montecarlo.md, one process at a time:
# strong_memorization_30 at R = 400 first, then every other design in rounds of 50
# replications (R = 50, 100, 150, 200), so a run cut short by time has every design at
# the same R. The table is then written from every replication done (--summarize-only).
set -e
P=docs/montecarlo/progress_verdict.jsonl
run() { nice .venv/bin/python -m research.montecarlo --wild-draws 399 --progress $P \
          --out /tmp/montecarlo_part.json --doc '' "$@"; }
run --reps 400 --designs strong_memorization_30
for R in 50 100 150 200; do
  run --reps $R --designs strong_null_post_large_30,strong_thin_periods_15,paper_like_50,power_concentrated_30,null_thin_periods_15,null_concentrated_30,null_10_clusters,null_20_clusters,null_iid_50,null_dominant_30,null_concentrated_60,null_unbalanced_60,null_concentrated_100
done
