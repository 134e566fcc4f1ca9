"""Monte Carlo of the shipped test: size and power of the verdict over simulated panels.

Each replication builds a pre- and a post-cutoff panel with the columns the dbt models
produce (docs/CONTRACTS.md, Panel) and runs exactly what the dbt Python models run:
``lookahead.stats.protocol.run_protocol`` (python_models/marts/results/regression_results_py.py) and
``lookahead.stats.verdict.verdict_frame`` (python_models/marts/results/verdict_py.py), with the study
settings a user would set (``StatsSections``). Nothing here re-implements a regression,
a p-value or a threshold; it only tabulates what those functions return.

The data-generating process, per row of entity e, period t:
  outcome = a_e + b_t + u_et + gamma * mu_hat + eps,   eps ~ N(0, 1), u_et ~ N(0, rho^2)
  mu_hat  = +-1 coin flip (a forecast with true predictive power gamma that does not
            depend on LAP), except on memorized rows, where mu_hat = sign(u_et + eps):
            the realized direction.
  LAP     = recall mass P(up) + P(down): U(0, 1) in "active" entities, U(0, 0.05)
            elsewhere; memorized rows recall with LAP ~ U(0.8, 1) and put 97.5% of it on
            the realized direction; otherwise the split is U(0, 1). ud = P(up) - P(down).
  Memorized rows: a share `mem_prob` of pre-cutoff rows in active entities whose base
            LAP is above 0.5. Post-cutoff rows are never memorized and their LAP
            collapses to U(0, 0.05) in every entity (post_lap "collapsed"), or keeps the
            pre-cutoff distribution (post_lap "varies": a null placebo with power).
  Thin periods: with presence < 1 each (entity, period) cell is observed with that
            probability, so a period holds few entities (period effects crossed with
            entity clusters, where the bootstrap must re-project its draws).
Under mem_prob = 0 every null holds exactly: beta_3 = 0 (mu_hat's slope does not vary
with LAP) and theta = 0 (ud does not predict the outcome). The null designs have
post-cutoff rows, so the whole verdict (detection, validation, placebo) is run and its
false "Contamination detected" rate measured; the two designs of 1,587 entities have none
(with_post False) and serve the detection-only run.

Designs (DESIGNS): an iid-like null with 50 entities; a null whose LAP variation sits in
5 of 30 entities (few clusters carry all the identifying variation: the case where the
CRV1 t(G-1) test over-rejects); nulls with 10 and 20 entities; a paper-like effect
(standardized beta_3 of about 0.03, the paper's 0.077% / ~2.5% daily return sd, which
gives t of about 1 at this N); strong planted memorization; the same with a null
post-cutoff panel as large as the pre-cutoff one; and nulls and strong memorization with
about 6 entities per period.

Run (docs/montecarlo.md has the table this wrote):
    python -m research.montecarlo --reps 1000 --wild-draws 399 \\
        --out docs/montecarlo/results.json --progress docs/montecarlo/progress.jsonl
The progress file gets one JSON line per replication, so a run can be resumed and
watched; --workers runs replications in parallel processes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from lookahead.stats.protocol import StatsSections, run_protocol
from lookahead.stats.verdict import CONTAMINATION, MIXED, verdict_frame


@dataclass(frozen=True)
class Design:
    """One simulated study design (see the module doc for the data-generating process)."""

    name: str
    n_entities: int
    null: bool
    mem_prob: float = 0.0
    active_entities: int | None = None  # entities whose LAP varies (None: all)
    n_periods: int = 8
    per_cell: int = 3
    post_periods: int = 4
    rho: float = 0.5
    gamma: float = 0.1
    with_post: bool = True  # False: no post-cutoff rows (placebo infeasible), to save time
    sizes: str = "balanced"  # balanced | dominant (entity 0 holds half the rows) | unbalanced
    description: str = ""
    #: post-cutoff LAP: "collapsed" (U(0, 0.05) everywhere: the mechanism's signature) or
    #: "varies" (the pre-cutoff distribution, nobody memorized: a null placebo with power)
    post_lap: str = "collapsed"
    #: share of (entity, period) cells observed (below 1: few entities per period)
    presence: float = 1.0

    def rows_per_cell(self) -> np.ndarray:
        """Expected rows per (entity, period) cell, per entity: the same in every
        replication. dominant: entity 0 has as many rows as all the others together;
        unbalanced: 1 to 24 rows per cell over entities (a few large firms), and each cell
        Poisson around it, so entities miss periods."""
        base = np.full(self.n_entities, float(self.per_cell))
        if self.sizes == "dominant":
            base[0] = self.per_cell * (self.n_entities - 1)
        elif self.sizes == "unbalanced":
            base = 1.0 + 23.0 * (np.arange(self.n_entities) / max(self.n_entities - 1, 1)) ** 4
        return base


DESIGNS: tuple[Design, ...] = (
    Design("null_concentrated_30", 30, True, active_entities=5, description="null, 30 entities, LAP varies in 5 only"),
    Design("null_10_clusters", 10, True, description="null, 10 entities"),
    Design("null_20_clusters", 20, True, description="null, 20 entities"),
    Design("null_iid_50", 50, True, description="null, 50 entities, LAP varies in all"),
    Design("null_dominant_30", 30, True, sizes="dominant", description="null, 30 entities, one holds 50% of rows"),
    Design("null_concentrated_60", 60, True, active_entities=5, description="null, 60 entities, LAP varies in 5 only"),
    Design(
        "null_unbalanced_60",
        60,
        True,
        sizes="unbalanced",
        description="null, 60 entities of 1-24 rows per period (Poisson: periods missing)",
    ),
    Design("null_concentrated_100", 100, True, active_entities=5, description="null, 100 entities, LAP varies in 5 only"),
    Design(
        "null_thin_periods_15",
        15,
        True,
        n_periods=24,
        post_periods=12,
        presence=0.4,
        description="null, 15 entities x 24 periods, 40% of cells observed: about 6 entities per period",
    ),
    Design(
        "null_concentrated_1587",
        1587,
        True,
        active_entities=79,
        with_post=False,
        per_cell=1,
        description="null, 1,587 entities (the paper's count), LAP varies in 79 (5%)",
    ),
    Design(
        "power_concentrated_30",
        30,
        False,
        mem_prob=0.4,
        active_entities=5,
        description="40% of high-LAP rows memorized in the 5 of 30 entities whose LAP varies",
    ),
    Design(
        "power_concentrated_1587",
        1587,
        False,
        mem_prob=0.1,
        active_entities=79,
        per_cell=1,
        with_post=False,
        description="10% of high-LAP rows memorized in the 79 of 1,587 entities whose LAP varies",
    ),
    Design(
        "paper_like_50",
        50,
        False,
        mem_prob=0.03,
        description="3% of high-LAP rows memorized (standardized beta_3 ~ 0.03), 50 entities",
    ),
    Design("strong_memorization_30", 30, False, mem_prob=0.4, description="40% of high-LAP rows memorized, 30 entities"),
    Design(
        "strong_null_post_large_30",
        30,
        False,
        mem_prob=0.4,
        post_periods=8,
        post_lap="varies",
        description="40% of high-LAP rows memorized, 30 entities; the post-cutoff panel "
        "as large as the pre-cutoff one, LAP varying as before, nothing memorized",
    ),
    Design(
        "strong_thin_periods_15",
        15,
        False,
        mem_prob=0.4,
        n_periods=24,
        post_periods=12,
        presence=0.4,
        description="40% of high-LAP rows memorized, 15 entities x 24 periods, about 6 entities per period",
    ),
)


def simulate(d: Design, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(panel_pre, panel_post) with the Panel contract's columns for one replication."""
    a = rng.normal(0, 0.5, d.n_entities)
    b = rng.normal(0, 0.5, d.n_periods + d.post_periods)
    active = np.zeros(d.n_entities, dtype=bool)
    active[: d.active_entities if d.active_entities is not None else d.n_entities] = True
    out = []
    for sample, periods in (("pre", range(d.n_periods)), ("post", range(d.n_periods, d.n_periods + d.post_periods))):
        e, t = np.meshgrid(np.arange(d.n_entities), np.array(list(periods)), indexing="ij")
        per = d.rows_per_cell()[e.ravel()]
        counts = (rng.poisson(per) if d.sizes == "unbalanced" else per).astype(int)
        if d.presence < 1.0:
            counts = counts * (rng.uniform(size=counts.shape) < d.presence)
        e = np.repeat(e.ravel(), counts)
        t = np.repeat(t.ravel(), counts)
        n = len(e)
        u_cell = rng.normal(0, d.rho, (d.n_entities, d.n_periods + d.post_periods))
        shock = u_cell[e, t] + rng.normal(size=n)
        mu = rng.choice([-1.0, 1.0], n)
        varies = active[e] & ((sample == "pre") | (d.post_lap == "varies"))
        base = np.where(varies, rng.uniform(0, 1, n), rng.uniform(0, 0.05, n))
        mem = (sample == "pre") & active[e] & (base > 0.5) & (rng.uniform(size=n) < d.mem_prob)
        direction = np.where(shock > 0, 1.0, -1.0)
        lap = np.where(mem, rng.uniform(0.8, 1.0, n), base)
        split = np.where(mem, np.where(direction > 0, 0.975, 0.025), rng.uniform(0, 1, n))
        mu = np.where(mem, direction, mu)
        outcome = a[e] + b[t] + d.gamma * np.where(mem, 0.0, mu) + shock
        p_up, p_down = lap * split, lap * (1 - split)
        df = pd.DataFrame(
            {
                "row_id": [f"{sample}{i}" for i in range(n)],
                "entity_num": e,
                "period_num": t,
                "target_date": pd.Timestamp("2020-01-01") + pd.to_timedelta(t * 31 + rng.integers(0, 28, n), "D"),
                "outcome": outcome,
                "mu_hat": mu,
                "p_up": p_up,
                "p_down": p_down,
                "lap": p_up + p_down,
                "ud": p_up - p_down,
                "approximated": False,
            }
        )
        df["high_lap"] = (df["lap"] > df["lap"].median()).astype(int)  # pooled_median, per sample
        out.append(df)
    if not d.with_post:
        return out[0], out[1].iloc[0:0].copy()
    return out[0], out[1]


def replicate(d: Design, rep: int, settings: StatsSections, base_seed: int = 20240101) -> dict:
    """One replication: the shipped regressions and verdict, and what they decided."""
    rng = np.random.default_rng([base_seed, DESIGNS.index(d) if d in DESIGNS else 99, rep])
    pre, post = simulate(d, rng)
    s = replace(settings, protocol=replace(settings.protocol, wild_bootstrap_seed=int(rng.integers(0, 2**31 - 1))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_protocol(pre, post, s)
        v = verdict_frame(res, pre, post, s).iloc[0]

    def num(x) -> float:
        return float(x) if x is not None and not pd.isna(x) else math.nan

    return {
        "design": d.name,
        "rep": rep,
        "beta3": num(v["beta3"]),
        "beta3_t": num(v["beta3_t"]),
        "p_crv1": num(v["beta3_p_one_sided"]),
        "p_wild": num(v["beta3_p_wild_one_sided"]),
        "p_used": num(v["beta3_p_used"]),
        "inference_used": str(v["inference_used"]),
        "theta_high_p_crv1": num(v["theta_high_p"]),
        "theta_high_p_wild": num(v["theta_high_p_wild"]),
        "theta_diff_p_crv1": num(v["theta_diff_p_one_sided"]),
        "theta_diff_p_wild": num(v["theta_diff_p_wild_one_sided"]),
        "validation_pattern": bool(v["validation_pattern"]),
        "placebo_passes": bool(v["placebo_passes"]),
        "verdict": str(v["verdict"]),
        "g": num(v["n_clusters_pre"]),
        "g_star": num(v["beta3_g_star"]),
        "wild_draws_used": num(v["beta3_wild_draws"]),
        "placebo": str(v["placebo_outcome"]),
    }


def replicate_detection(d: Design, rep: int, settings: StatsSections, base_seed: int = 20240101) -> dict:
    """One replication of the detection test alone: the protocol's own pre-cutoff detection
    request (``lookahead.stats.protocol._requests``, what ``run_protocol`` fits for model
    `regression_results`) through ``fit_fe``, and the p the verdict reads (wild when it
    ran). A fifth of a full replication's cost, for the designs with many replications."""
    from lookahead.stats.fe_regression import fit_fe
    from lookahead.stats.protocol import BETA3, DETECTION_SPEC, _requests

    rng = np.random.default_rng([base_seed, DESIGNS.index(d) if d in DESIGNS else 99, rep])
    pre, _ = simulate(d, rng)
    s = replace(settings, protocol=replace(settings.protocol, wild_bootstrap_seed=int(rng.integers(0, 2**31 - 1))))
    req = next(r for r, _ in _requests("pre", s, ()) if r.spec == DETECTION_SPEC)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fit_fe(pre, req)
    row = res[res["term"] == BETA3].iloc[0]

    def num(x) -> float:
        return float(x) if x is not None and not pd.isna(x) else math.nan

    p_wild = num(row["p_wild_one_sided"])
    return {
        "design": d.name,
        "rep": rep,
        "mode": "detection",
        "beta3": num(row["estimate"]),
        "beta3_t": num(row["t"]),
        "p_crv1": num(row["p_one_sided"]),
        "p_wild": p_wild,
        "p_used": p_wild if np.isfinite(p_wild) else num(row["p_one_sided"]),
        "inference_used": "wild bootstrap" if np.isfinite(p_wild) else "CRV1",
        "g": num(row["n_clusters"]),
        "g_star": num(row["n_clusters_effective"]),
        "wild_draws_used": num(row["wild_draws"]),
    }


def summarize(rows: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Rejection rates per design with Monte Carlo standard errors sqrt(p(1-p)/R)."""
    out = []
    for name, g in rows.groupby("design", sort=False):
        r = len(g)
        full = "verdict" in g and g["verdict"].notna().all()
        nan = float("nan")
        rates = {
            "beta3_crv1": (g["p_crv1"] < alpha).mean(),
            "beta3_wild": (g["p_wild"] < alpha).mean(),
            "verdict_detection_test": (g["p_used"] < alpha).mean(),
            "theta_high_crv1": (g["theta_high_p_crv1"] < alpha).mean() if full else nan,
            "theta_high_wild": (g["theta_high_p_wild"] < alpha).mean() if full else nan,
            "theta_diff_crv1": (g["theta_diff_p_crv1"] < alpha).mean() if full else nan,
            "theta_diff_wild": (g["theta_diff_p_wild"] < alpha).mean() if full else nan,
            "placebo_passes": g["placebo_passes"].astype(bool).mean() if full else nan,
            "verdict_contamination": (g["verdict"] == CONTAMINATION).mean() if full else nan,
            "verdict_mixed": (g["verdict"] == MIXED).mean() if full else nan,
        }
        row = {"design": name, "reps": r}
        for k, p in rates.items():
            row[k] = float(p)
            row[k + "_mcse"] = float(math.sqrt(p * (1 - p) / r)) if r else math.nan
        row["wild_used_share"] = float((g["inference_used"] == "wild bootstrap").mean())
        if "g_star" in g:
            row["g"] = float(g["g"].mean())
            row["g_star_mean"] = float(g["g_star"].mean())
        out.append(row)
    return pd.DataFrame(out)


def to_markdown(table: pd.DataFrame) -> str:
    """The docs/montecarlo.md table: rejection rates in % with Monte Carlo SE."""
    cols = [
        ("beta3_crv1", "beta_3 CRV1"),
        ("beta3_wild", "beta_3 wild"),
        ("verdict_detection_test", "verdict's detection test"),
        ("theta_high_crv1", "high-LAP theta CRV1"),
        ("theta_high_wild", "high-LAP theta wild"),
        ("theta_diff_crv1", "high-low CRV1"),
        ("theta_diff_wild", "high-low wild"),
        ("placebo_passes", "placebo passes"),
        ("verdict_contamination", "verdict: Contamination detected"),
        ("verdict_mixed", "verdict: Mixed/invalid"),
    ]
    with_g = "g_star_mean" in table.columns  # runs recorded G* (this code); older ones did not
    if not with_g:
        head = "| design | R | " + " | ".join(c[1] for c in cols) + " |\n"
        head += "|---|---:|" + "---:|" * len(cols) + "\n"
    else:
        cols = [c for c in cols if table[c[0]].notna().any()]  # a detection-only run has no theta
        head = "| design | R | G | mean G* | " + " | ".join(c[1] for c in cols) + " |\n"
        head += "|---|---:|---:|---:|" + "---:|" * len(cols) + "\n"
    body = ""
    for _, r in table.iterrows():
        cells = [f"{100 * r[k]:.1f} ({100 * r[k + '_mcse']:.1f})" if np.isfinite(r[k]) else "-" for k, _ in cols]
        g = ""
        if with_g:
            g = (f"{r['g']:.0f} | " if np.isfinite(r["g"]) else "NA | ") + (
                f"{r['g_star_mean']:.1f} | " if np.isfinite(r["g_star_mean"]) else "NA | "
            )
        body += f"| {r['design']} | {int(r['reps'])} | {g}" + " | ".join(cells) + " |\n"
    return head + body


TABLE_START, TABLE_END = "<!-- table:start -->", "<!-- table:end -->"
#: The detection-only run's table (--detection-only) has markers of its own.
DETECTION_START, DETECTION_END = "<!-- detection-table:start -->", "<!-- detection-table:end -->"


def write_doc_table(doc: Path, table_md: str, start: str = TABLE_START, end: str = TABLE_END) -> None:
    """Put the table between the markers of docs/montecarlo.md, so the figures the docs
    quote are the ones this run wrote (the prose around them is written by hand)."""
    text = doc.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise SystemExit(f"--doc: '{doc}' has no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{start}\n{table_md}{end}{tail}", encoding="utf-8")


def _read_progress(progress: Path) -> list[dict]:
    """The replications in the progress file; a line torn by a killed run is skipped (its
    replication counts as not done and runs again)."""
    if not progress.exists():
        return []
    rows = []
    for line in progress.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and "design" in r and "rep" in r:
            rows.append(r)
    return rows


def _done(progress: Path) -> set[tuple[str, int]]:
    return {(r["design"], int(r["rep"])) for r in _read_progress(progress)}


def _worker(args: tuple[Design, list[int], StatsSections, int, str, bool]) -> None:
    d, reps, settings, base_seed, progress, detection_only = args
    from threadpoolctl import threadpool_limits

    one = replicate_detection if detection_only else replicate
    with threadpool_limits(1):
        for rep in reps:
            row = one(d, rep, settings, base_seed)
            with open(progress, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")


def run(
    reps: int,
    settings: StatsSections,
    progress: Path,
    designs: tuple[Design, ...] = DESIGNS,
    base_seed: int = 20240101,
    workers: int = 1,
    detection_only: bool = False,
) -> pd.DataFrame:
    """All designs x reps (resuming from `progress`); returns the per-replication rows."""
    progress.parent.mkdir(parents=True, exist_ok=True)
    done = _done(progress)
    jobs = []
    for d in designs:
        todo = [r for r in range(reps) if (d.name, r) not in done]
        for k in range(max(workers, 1)):
            part = todo[k :: max(workers, 1)]
            if part:
                jobs.append((d, part, settings, base_seed, str(progress), detection_only))
    if workers > 1 and jobs:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as ex:
            list(ex.map(_worker, jobs))
    else:
        for job in jobs:
            _worker(job)
    names = [d.name for d in designs]
    df = pd.DataFrame(_read_progress(progress))
    df = df[df["design"].isin(names) & (df["rep"] < reps)].drop_duplicates(["design", "rep"])
    return df


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Monte Carlo size/power of the shipped verdict")
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--wild-draws", type=int, default=399)
    ap.add_argument("--wild-weights", default="webb")
    ap.add_argument("--designs", default=",".join(d.name for d in DESIGNS))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--base-seed", type=int, default=20240101)
    ap.add_argument("--progress", default="docs/montecarlo/progress.jsonl")
    ap.add_argument("--out", default="docs/montecarlo/results.json")
    ap.add_argument("--doc", default="docs/montecarlo.md", help="write the table between its markers in this file ('' = do not)")
    ap.add_argument(
        "--detection-only", action="store_true", help="run the pre-cutoff detection regression alone (replicate_detection)"
    )
    ap.add_argument(
        "--summarize-only", action="store_true", help="tabulate the replications already in --progress (up to --reps per design)"
    )
    ap.add_argument(
        "--round-reps",
        type=int,
        default=0,
        help="with --summarize-only: designs other than those at --reps are cut to "
        "a multiple of this (the last round every such design completed), so "
        "a run stopped in the middle of a round tabulates every design at one R",
    )
    args = ap.parse_args(argv)
    wanted = [x.strip() for x in args.designs.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in {d.name for d in DESIGNS}]
    if unknown:
        raise SystemExit(f"--designs: unknown design(s) {unknown}; have {[d.name for d in DESIGNS]}")
    designs = tuple(d for d in DESIGNS if d.name in wanted)
    settings = StatsSections.with_defaults(
        cluster="entity", lap_measure="recall", wild_bootstrap_draws=args.wild_draws, wild_bootstrap_weights=args.wild_weights
    )
    t0 = time.perf_counter()
    if args.summarize_only:
        rows = pd.DataFrame([r for p in args.progress.split(",") for r in _read_progress(Path(p))])
        rows = rows[rows["design"].isin([d.name for d in designs]) & (rows["rep"] < args.reps)]
        rows = rows.drop_duplicates(["design", "rep"])
        if args.round_reps > 0:
            counts = rows.groupby("design")["rep"].nunique()
            partial = counts[counts < args.reps]
            if len(partial):
                r = int(partial.min()) // args.round_reps * args.round_reps
                rows = rows[~rows["design"].isin(partial.index) | (rows["rep"] < r)]
    else:
        rows = run(args.reps, settings, Path(args.progress), designs, args.base_seed, args.workers, args.detection_only)
    table = summarize(rows)
    result = {
        "command": "python -m research.montecarlo " + " ".join(argv if argv is not None else os.sys.argv[1:]),
        "alpha": 0.05,
        "reps": args.reps,
        "wild_draws": args.wild_draws,
        "wild_weights": args.wild_weights,
        "detection_only": args.detection_only,
        "base_seed": args.base_seed,
        "seconds": round(time.perf_counter() - t0, 1),
        "designs": [asdict(d) for d in designs],
        "table": table.to_dict(orient="records"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.doc:
        markers = (DETECTION_START, DETECTION_END) if args.detection_only else (TABLE_START, TABLE_END)
        write_doc_table(Path(args.doc), to_markdown(table), *markers)
    print(to_markdown(table))


if __name__ == "__main__":
    main()
