"""Benchmark: the wild cluster bootstrap the verdict reads, fast route vs the dense one.

The verdict reads a restricted wild cluster bootstrap p from five regressions: detection,
the high- and low-LAP validation halves, their difference (pre-cutoff) and detection on
the post-cutoff sample (the placebo). This times them at the paper's scale (91,361 rows,
1,587 entities of skewed size, monthly periods; the pre/post split at a cutoff) with 999
draws:

- the fast route (lookahead/stats/wild.py: fixed effects partialled out once, draws on
  cluster sums), inside ``run_protocol`` exactly as the dbt model `regression_results`
  runs it: the whole protocol with 999 draws, the same with the bootstrap off (0 draws),
  and the bootstrap's own share (partialling out + draws) per regression;
- the dense route it replaces (``wild_p_dense``: the `wildboottest` package on a rows x
  dummies design, what the project shipped before), side by side on the same regressions
  where it can run: on subsamples of entities (the dense design grows as rows x
  clusters), alternating fast and dense per size so machine load hits both alike. At the
  full size it is run once with --dense-full (minutes and gigabytes).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_wild.py [--rows 91361] [--entities 1587]
        [--draws 999] [--dense-entities 50,100,200,400] [--dense-full]
        [--out benchmarks/results/bench_wild.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from lookahead.settings_sections import ProtocolSettings
from lookahead.stats.fe_regression import FitRequest
from lookahead.stats.protocol import (
    DIFFERENCE_SPEC,
    StatsSections,
    _requests,
    run_protocol,
    with_halves,
)
from lookahead.stats.wild import PartialledDesign, wild_p_dense


def make_panel(rows: int, entities: int, months: int, seed: int) -> pd.DataFrame:
    """Protocol panel columns: skewed entity sizes (lognormal, as news coverage), monthly
    periods, LAP varying in every entity, no effect (the bootstrap's cost does not depend
    on the data's signal)."""
    rng = np.random.default_rng(seed)
    size = rng.lognormal(0.0, 1.2, entities)
    ent = np.concatenate([np.arange(entities), rng.choice(entities, rows - entities, p=size / size.sum())])
    month = rng.integers(0, months, rows)
    p_up, p_down = rng.uniform(0, 0.5, rows), rng.uniform(0, 0.5, rows)
    lap = p_up + p_down
    df = pd.DataFrame(
        {
            "row_id": [f"r{i}" for i in range(rows)],
            "entity_num": ent,
            "period_num": month,
            "target_date": pd.Timestamp("2021-01-01") + pd.to_timedelta(month * 30, "D"),
            "text_date": pd.Timestamp("2020-12-25") + pd.to_timedelta(month * 30, "D"),
            "outcome": rng.normal(0, 1, entities)[ent] + rng.normal(0, 1, months)[month] + rng.normal(size=rows),
            "mu_hat": rng.choice([-1.0, 0.0, 1.0], rows),
            "lap": lap,
            "ud": p_up - p_down,
            "approximated": False,
        }
    )
    return df


def split(df: pd.DataFrame, months: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    cut = int(months * 0.8)
    out = []
    for part in (df[df["period_num"] < cut].copy(), df[df["period_num"] >= cut].copy()):
        part["high_lap"] = (part["lap"] > part["lap"].median()).astype(int)
        out.append(part)
    return out[0], out[1]


def verdict_regressions(
    pre: pd.DataFrame, post: pd.DataFrame, s: StatsSections
) -> list[tuple[str, FitRequest, pd.DataFrame, str]]:
    """(name, request, data, tested term) for the five regressions the verdict reads."""
    out = []
    for sample, panel in (("pre", pre), ("post", post)):
        for req, subset in _requests(sample, s, ()):
            if sample == "post" and req.spec != "detection":
                continue
            if req.spec == "validation_pooled":
                continue
            data = panel
            if subset is not None:
                data = panel[panel["high_lap"] == subset]
            elif req.spec == DIFFERENCE_SPEC:
                data = with_halves(panel)
            term = req.wild_terms[0]
            out.append((f"{req.spec} ({sample})", req, data, term))
    return out


def arrays(req: FitRequest, data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray]:
    cols = [t.split(":") for t in req.regressors]
    d = data.dropna(subset=[req.outcome, *{c for cs in cols for c in cs}, *req.fixed_effects])
    x = np.column_stack([np.prod([d[c].to_numpy(float) for c in cs], axis=0) for cs in cols])
    fe = [pd.factorize(d[f])[0] for f in req.fixed_effects]
    return d[req.outcome].to_numpy(float), x, fe, d["entity_num"].to_numpy()


def time_fast(regs, s: ProtocolSettings) -> dict:
    out = {}
    for name, req, data, term in regs:
        y, x, fe, cl = arrays(req, data)
        col = list(req.regressors).index(term)
        t0 = time.perf_counter()
        design = PartialledDesign(y, x, fe, cl)
        t1 = time.perf_counter()
        res = design.bootstrap(col, s, one_sided=term in req.one_sided_terms, two_sided_read=term in req.wild_two_sided_terms)
        t2 = time.perf_counter()
        out[name] = {
            "rows": len(y),
            "clusters": len(np.unique(cl)),
            "partial_out_s": t1 - t0,
            "draws_s": t2 - t1,
            "total_s": t2 - t0,
            "draws": res.draws,
            "p_one": res.p_one,
            "p_two": res.p_two,
            "g_star": res.g_star,
        }
    return out


def time_dense(regs, s: ProtocolSettings) -> dict:
    out = {}
    for name, req, data, term in regs:
        y, x, fe, cl = arrays(req, data)
        col = list(req.regressors).index(term)
        t0 = time.perf_counter()
        p_two, p_one = wild_p_dense(y, x, fe, cl, col, s)
        out[name] = {"rows": len(y), "total_s": time.perf_counter() - t0, "p_one": p_one, "p_two": p_two}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=91_361)
    ap.add_argument("--entities", type=int, default=1_587)
    ap.add_argument("--months", type=int, default=36)
    ap.add_argument("--draws", type=int, default=999)
    ap.add_argument("--dense-entities", default="50,100,200,400")
    ap.add_argument("--dense-full", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results/bench_wild.json")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    s = StatsSections.with_defaults(
        cluster="entity",
        lap_measure="recall",
        wild_bootstrap_draws=a.draws,
        wild_bootstrap_weights="webb",
        wild_bootstrap_seed=20240101,
    )
    wild = s.protocol
    df = make_panel(a.rows, a.entities, a.months, a.seed)
    pre, post = split(df, a.months)
    # warm up imports and the demeaner
    small_pre, small_post = split(df[df["entity_num"] < 30], a.months)
    run_protocol(small_pre, small_post, s)
    time_dense(verdict_regressions(small_pre, small_post, s)[:1], ProtocolSettings.with_defaults(wild_bootstrap_draws=9))
    load0 = os.getloadavg()

    t0 = time.perf_counter()
    res_on = run_protocol(pre, post, s)
    protocol_on = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_protocol(pre, post, StatsSections.with_defaults(cluster="entity", lap_measure="recall", wild_bootstrap_draws=0))
    protocol_off = time.perf_counter() - t0
    regs = verdict_regressions(pre, post, s)
    fast_full = time_fast(regs, wild)
    read = res_on[res_on["wild_draws"] > 0][
        [
            "spec",
            "sample",
            "term",
            "n_obs",
            "n_clusters",
            "n_clusters_effective",
            "wild_draws",
            "p_wild_one_sided",
            "p_wild_two_sided",
        ]
    ]

    side = []
    for k in [int(x) for x in a.dense_entities.split(",") if x.strip()]:
        sub_pre, sub_post = split(df[df["entity_num"] < k], a.months)
        sub = verdict_regressions(sub_pre, sub_post, s)
        f = time_fast(sub, wild)
        d = time_dense(sub, wild)
        tf, td = sum(v["total_s"] for v in f.values()), sum(v["total_s"] for v in d.values())
        side.append(
            {
                "entities": k,
                "rows": int(len(sub_pre) + len(sub_post)),
                "fast_s": tf,
                "dense_s": td,
                "dense_over_fast": td / tf,
                "p_one_fast": {n: v["p_one"] for n, v in f.items()},
                "p_one_dense": {n: v["p_one"] for n, v in d.items()},
            }
        )
        print(f"{k} entities: fast {tf:.2f} s, dense {td:.2f} s, {td / tf:.0f}x", flush=True)
    dense_full = None
    if a.dense_full:
        dense_full = time_dense(regs, wild)
    load1 = os.getloadavg()
    total_fast = sum(v["total_s"] for v in fast_full.values())
    result = {
        "command": "python benchmarks/bench_wild.py " + " ".join(os.sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_before": load0, "loadavg_after": load1},
        "rows": a.rows,
        "entities": a.entities,
        "months": a.months,
        "draws": a.draws,
        "pre_rows": len(pre),
        "post_rows": len(post),
        "run_protocol_with_bootstrap_s": protocol_on,
        "run_protocol_without_bootstrap_s": protocol_off,
        "bootstrap_share_s": protocol_on - protocol_off,
        "fast_verdict_regressions_s": total_fast,
        "fast_per_regression": fast_full,
        "regression_results_wild_rows": read.to_dict(orient="records"),
        "side_by_side": side,
        "dense_full": dense_full,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1, default=float) + "\n", encoding="utf-8")
    print(
        f"run_protocol with 999 draws: {protocol_on:.2f} s, without: {protocol_off:.2f} s; "
        f"the five verdict bootstraps alone: {total_fast:.2f} s"
    )


if __name__ == "__main__":
    main()
