#!/bin/bash
# alternating base/head dbt builds of the 91,361-row bench study; wall and CPU per build
V=/tmp/lookahead_pairs/91361/vars.json
for i in 1 2; do
  for side in base head; do
    [ $side = base ] && R=/tmp/base26 || R=/work/main
    rm -f /tmp/ab/$side.duckdb*
    cd $R
    /usr/bin/time -f "$side wall=%e cpu=%U+%S maxrss=%MkB" env DBT_PROFILES_DIR=$R/profiles DBT_SEND_ANONYMOUS_USAGE_STATS=False LOOKAHEAD_DUCKDB=/tmp/ab/$side.duckdb PYTHONPATH=$R GX_ANALYTICS_ENABLED=False \
      $R/.venv/bin/dbt build --vars "$(cat $V)" --target-path /tmp/ab/target_$side --project-dir $R --exclude bootstrap_results paper_tables lap_robustness tag:claims > /tmp/ab/$side.$i.log 2>&1
    tail -1 /tmp/ab/$side.$i.log
  done
done
