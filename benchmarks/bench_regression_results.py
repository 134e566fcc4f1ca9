"""regression_results alone: `run_protocol` on a built study's panel_pre and panel_post at
a given number of wild bootstrap draws, timed (wall, CPU) with each build of the crossed
fixed effects (lookahead.stats.wild._CrossedEffects.build) timed on its own; the table is
pickled, so two checkouts' tables can be compared cell by cell.

Why: at the default 999 draws regression_results was most of a 91,361-row build (the
pseudo-inverse of the crossed effects' Gram matrix per design); this times that node
without the rest of the build, in a fresh process per checkout.

    PYTHONPATH=<checkout> python benchmarks/bench_regression_results.py --db STUDY.duckdb \\
        [--draws 999] --table OUT.pkl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
import warnings
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="a built study's DuckDB file (panel_pre, panel_post, study_settings)")
    ap.add_argument("--draws", type=int, default=999)
    ap.add_argument("--table", required=True, help="where to pickle the regression_results table")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    import duckdb

    from lookahead.stats import wild
    from lookahead.stats.protocol import StatsSettings, run_protocol

    con = duckdb.connect(a.db, read_only=True)
    pre, post = con.sql("select * from panel_pre").df(), con.sql("select * from panel_post").df()
    s = StatsSettings.from_frame(con.sql("select * from study_settings").df())
    con.close()
    s = dataclasses.replace(s, wild=dataclasses.replace(s.wild, draws=a.draws))
    builds: list[float] = []
    build = wild._CrossedEffects.build

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = build(*args, **kwargs)
        builds.append(round(time.perf_counter() - t, 3))
        return out

    wild._CrossedEffects.build = staticmethod(timed)
    load = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    res = run_protocol(pre, post, s)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    res.to_pickle(a.table)
    print(
        json.dumps(
            {
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "crossed_builds_s": builds,
                "draws": a.draws,
                "load_before": load,
                "load_after": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
