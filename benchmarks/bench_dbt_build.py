"""Benchmark: `dbt build` against a bare script of the same path, at growing sizes.

A synthetic study in the raw-JSONL contract is generated with DuckDB (fast, and the
same SQL engine the project uses): the paper's 91,361 rows over 1,587 entities and
about 3,000 dates (default), 1,000,000 rows (--full) or any --sizes (the scale goals:
91,361, 1,000,000 and 10,000,000). Baseline: the bare DuckDB + pyfixest script
benchmarks/bare_protocol.py, run alternately with `dbt build` (paper tables, bootstrap
and claim models excluded on both sides); its coefficients and prompt-measure sums must
equal dbt's. Each run is a child process, measured three ways: wall time around it;
CPU-seconds, user + system of the child and every descendant it waited for (os.wait4,
which is how dbt's threads and Python models count); peak memory, the larger of the
child's max RSS (os.wait4) and the sampled peak of the RSS summed over it and its
descendants. Per size: medians of each, the ratios dbt / bare per pair (median and
range); between consecutive sizes: the growth exponent of each median,
log(b / a) / log(rows_b / rows_a) (1 = linear). The load average is recorded before and
after. --floors adds, to each pair, the builds of FLOORS: what dbt costs before any of
the project's tests; --full-each-pair (--full-each-pair-up-to ROWS: for the sizes up to
ROWS) adds the whole build (paper tables and bootstrap) to each pair instead of once at
the end, so its ratio comes from the same pairs.

    python benchmarks/bench_dbt_build.py [--sizes 91361 1000000 10000000] [--pairs 3]
        [--full] [--floors] [--full-each-pair | --full-each-pair-up-to ROWS] [--no-full-build]
        [--reuse] [--tmp DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb

from lookahead.config import Study, default_study_path, read_study_file, resolve
from lookahead.dbt_plugin import MEMORY_LIMIT_ENV, sized_memory_limit
from lookahead.identity import UNIT_TESTS_LEFT_OUT
from lookahead.keys import expected_queries
from lookahead.rows import load_rows

ROOT = Path(__file__).resolve().parents[1]
WILD_DRAWS = 0  # the wild bootstrap is off on both sides (see generate)


def generate(out: Path, n_rows: int, n_entities: int = 1587, n_dates: int = 3000, seed: int = 1) -> dict:
    """Observations CSV + forecast/recall/mink JSONL for n_rows rows."""
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"select setseed({seed / 10})")
    con.execute(f"""
        create table obs as
        with base as (
            select
                i,
                cast(floor(random() * {n_entities}) as integer) as e,
                cast(floor(random() * {n_dates}) as integer) as d,
                random() as u1, random() as u2, random() as u3
            from range({n_rows}) as t(i)
        )
        select
            'r' || i as row_id,
            'E' || e as entity_id,
            'Entity ' || e as entity_name,
            'T' || e as ticker,
            'Headline ' || i || ' about entity ' || e as text,
            date '2012-01-02' + d as text_date,
            date '2012-01-02' + d + 1 as target_date,
            (u1 - 0.5) + 0.2 * (u2 - 0.5) as outcome,
            case when u2 > 0.5 then 'up' else 'down' end as label,
            0.05 + 0.9 * u3 as lap
        from base
    """)
    con.execute(
        "copy (select row_id, entity_id, entity_name, ticker, text, text_date, target_date, outcome "
        f"from obs) to '{out}/observations.csv' (header)"
    )
    # The study (the demo study's text with this data, cache and model) and the key of
    # every query it asks for, computed by the package as the jobs compute them: a build
    # uses only lines under those keys.
    cutoff = con.sql("select quantile_disc(target_date, 0.8) from obs").fetchone()[0]
    vars_ = {
        **read_study_file(default_study_path()),
        "study_name": f"bench_{n_rows}",
        "data_path": str(out / "observations.csv"),
        "raw_dir": str(raw),
        "model_id": "bench",
        "training_cutoff": str(cutoff),
        "period_frequency": "trading_day",
        "bootstrap_draws": 200,
        # the bare script fits the regressions without the restricted wild cluster
        # bootstrap; its 999 default draws cost regression_results about 8x the time
        # and 5x the memory at this size, so it is off on both sides (like the paper
        # bootstrap), and timed on its own elsewhere
        "wild_bootstrap_draws": WILD_DRAWS,
    }
    study = Study(vars=resolve(vars_))
    # with the query text and params each key hashes: a line whose fields do not hash to
    # its key is no answer (lookahead.keys.fields_key, staging's fields_match)
    keys = expected_queries(study, load_rows(study)[0])  # noqa: F841
    con.execute("create table keys as select * from keys")
    con.execute(f"""
        copy (
            select k.key, 'forecast' as task, 'bench' as model_id,
                   'bench' as backend, obs.row_id, k.query_text as prompt, k.query_text,
                   k.params_json::json as params, label as response_text, 0.9 as first_token_prob,
                   false as approximated, '2026-01-01T00:00:00Z' as finished_at
            from obs inner join keys k on k.task = 'forecast' and k.row_id = obs.row_id
        ) to '{raw}/forecast.jsonl' (format json)
    """)
    con.execute(f"""
        copy (
            with pairs as (
                select entity_id, target_date, any_value(lap) as lap, any_value(label) as label
                from obs group by entity_id, target_date
            )
            select k.key, 'recall' as task,
                   'bench' as model_id, 'bench' as backend, pairs.entity_id,
                   strftime(pairs.target_date, '%Y-%m-%d') as target_date,
                   k.query_text as prompt, k.query_text, k.params_json::json as params,
                   label as response_text,
                   [{{'token_id': 1, 'token': ' up', 'logprob': ln(case when label = 'up' then lap * 0.8 else lap * 0.2 end)}},
                    {{'token_id': 2, 'token': ' down', 'logprob': ln(case when label = 'up' then lap * 0.2 else lap * 0.8 end)}},
                    {{'token_id': 3, 'token': ' unknown', 'logprob': ln(0.99 - lap)}}]
                   || list_transform(range(17),
                                     x -> {{'token_id': 100 + x, 'token': 'w' || x, 'logprob': ln(0.0005)}}) as top_logprobs,
                   false as approximated, '2026-01-01T00:00:00Z' as finished_at
            from pairs inner join keys k on k.task = 'recall' and k.entity_id = pairs.entity_id
                and k.target_date = strftime(pairs.target_date, '%Y-%m-%d')
        ) to '{raw}/recall.jsonl' (format json)
    """)
    con.execute(f"""
        copy (
            select k.key, 'mink' as task, 'bench' as model_id, 'bench' as backend,
                   obs.row_id, k.query_text as prompt, k.query_text, k.params_json::json as params,
                   [{{'token_id': 0, 'token': '<s>', 'logprob': null}}]
                   || list_transform(range(30), x -> {{'token_id': x + 1, 'token': 't',
                                                       'logprob': ln(0.01 + 0.9 * lap * ((x % 7) + 1) / 7)}}) as prompt_logprobs,
                   false as approximated, '2026-01-01T00:00:00Z' as finished_at
            from obs inner join keys k on k.task = 'mink' and k.row_id = obs.row_id
        ) to '{raw}/mink.jsonl' (format json)
    """)
    con.close()
    return vars_


def _descendants(root: int) -> list[int]:
    """A process and all its descendants, from /proc (a scan of every process: ~6 ms)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, int, str]:
    """Wall seconds, CPU seconds (user + system of the child and the descendants it
    waited for), peak RSS (MiB), return code, output tail.

    Peak RSS is the larger of the child's own peak (os.wait4, exact) and the peak of the
    summed RSS of the child and every process it started (sampled every 20 ms), so memory
    held by a helper process the build starts counts against the build."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree_peak = [0.0]
    done = threading.Event()

    def sample() -> None:  # the process tree is rescanned every 0.5 s, its RSS read every 20 ms
        pids, tick = [proc.pid], 0
        while not done.wait(0.02):
            if tick % 25 == 0:
                pids = _descendants(proc.pid)
            tick += 1
            tree_peak[0] = max(tree_peak[0], _rss_mib(pids))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    return (wall, usage.ru_utime + usage.ru_stime, max(usage.ru_maxrss / 1024, tree_peak[0]), proc.returncode, out[-3000:])


def _env(db: Path, checkout: Path = ROOT) -> dict[str, str]:
    """dbt's environment for a build into `db` by the project at `checkout`."""
    return dict(
        os.environ,
        DBT_PROFILES_DIR=str(checkout / "profiles"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
        LOOKAHEAD_DUCKDB=str(db),
        PYTHONPATH=str(checkout),
        GX_ANALYTICS_ENABLED="False",
    )


def dbt_build(vars_: dict, db: Path, exclude: list[str] | None = None, extra: list[str] | None = None) -> dict:
    """One `dbt build` in a child process; per-node times from target/run_results.json."""
    dbt = Path(sys.executable).with_name("dbt")
    target = db.parent / "target"  # per study: concurrent builds never share run_results.json
    cmd = [str(dbt), "build", "--vars", json.dumps(vars_), "--target-path", str(target)]
    if exclude:
        cmd += ["--exclude", *exclude]
    cmd += extra or []
    wall, cpu, peak, rc, tail = _run(cmd, _env(db))
    if rc:
        print(tail)
    res = {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak, "returncode": rc}
    run_results = target / "run_results.json"
    if run_results.exists():
        rr = json.loads(run_results.read_text())
        nodes = {
            r["unique_id"].split(".", 1)[0] + "." + r["unique_id"].split(".")[-1]
            if r["unique_id"].startswith("test.")
            else r["unique_id"].split(".")[-1]: r["execution_time"]
            for r in rr["results"]
        }
        res["dbt_elapsed_s"] = rr.get("elapsed_time")
        res["tests_n"] = sum(1 for k in nodes if k.startswith("test."))
        res["tests_s"] = sum(t for k, t in nodes.items() if k.startswith("test."))
        res["nodes_s"] = {k: round(t, 3) for k, t in sorted(nodes.items(), key=lambda kv: -kv[1]) if not k.startswith("test.")}
    return res


def bare(vars_path: Path, out: Path) -> dict:
    wall, cpu, peak, rc, tail = _run(
        [sys.executable, str(ROOT / "benchmarks" / "bare_protocol.py"), "--vars", str(vars_path), "--out", str(out)],
        _env(out.parent / "unused.duckdb"),
    )
    if rc:
        print(tail)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak, "returncode": rc}


def coefficient_gap(db: Path, bare_out: Path) -> float:
    """Largest |dbt - bare| over every coefficient of the ten regressions (and each
    prompt measure, summed over the panel, within 1e-9 relative)."""
    bare = json.loads(bare_out.read_text())
    ref, bare_sums = bare["coefficients"], bare["lap_sums"]
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("select spec, sample, term, estimate from regression_results").fetchall()
    sums = dict(
        zip(bare_sums, con.execute(f"select {', '.join(f'sum({c})' for c in bare_sums)} from panel").fetchone(), strict=False)
    )
    con.close()
    gap, n = 0.0, 0
    extra = sorted({f"{spec}|{sample}" for spec, sample, _, _ in rows} - set(ref))
    if extra:  # the same outputs on both sides, or the ratio compares different work
        raise SystemExit(f"dbt fits specifications the bare script does not: {', '.join(extra)}")
    for spec, sample, term, est in rows:
        b = ref[f"{spec}|{sample}"].get(term)
        if b is None or est is None:
            raise SystemExit(f"coefficient {spec}/{sample}/{term} missing on one side (dbt {est}, bare {b})")
        gap, n = max(gap, abs(float(est) - b)), n + 1
    if n != sum(len(v) for v in ref.values()):
        raise SystemExit(f"dbt has {n} coefficients, the bare script {sum(len(v) for v in ref.values())}")
    for col, b in bare_sums.items():
        d = sums[col]
        if (d is None) != (b is None) or (b is not None and abs(d - b) > 1e-9 * abs(b)):
            raise SystemExit(f"{col} differs: dbt's panel sums to {d}, the bare script's to {b}")
    return gap


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# What dbt costs before the project's own checks (--floors): the same build without a
# single data or unit test, and dbt's fixed start (its import, the manifest, the run-start
# checks and one one-row model).
FLOORS = {
    "no_tests": ["--exclude-resource-type", "test", "unit_test"],
    "start_only": ["--select", "study_settings", "--exclude-resource-type", "test", "unit_test"],
}


#: What the bare script does not do, excluded from the timed build: the paper tables and
#: bootstrap, lap_robustness and cutoff_sensitivity (which run after them: the fits run
#: one at a time, so each refs the one before it), each a Python model (<name>_py) and
#: the contracted view over it, and the claim-level method (seed 002: its models and tests
#: run on no claims here). Naming the views alone, as before the Python models were
#: split off, left the Python models in the build, where paper_tables_py failed reading a
#: bootstrap_results view that was never built, and cutoff_sensitivity_py a lap_robustness.
EXCLUDED = [
    *(
        f"{name}{part}"
        for name in ("bootstrap_results", "paper_tables", "lap_robustness", "cutoff_sensitivity")
        for part in ("", "_py")
    ),
    "tag:claims",
]
#: What the timed build leaves out besides EXCLUDED, as `lookahead run` does: dbt's unit
#: tests (lookahead.identity.UNIT_TESTS_LEFT_OUT), which test the models' SQL on fixed
#: rows, not the study. --unit-tests keeps them (the basis of the figures before it).
AS_RUN = list(UNIT_TESTS_LEFT_OUT)
#: Per-run figures summarised per size (median) and compared per pair (dbt / bare).
MEASURES = ("wall_s", "cpu_s", "peak_rss_mib")


def study(n: int, out_root: Path, reuse: bool) -> tuple[dict, Path, float]:
    """The generated study of n rows (generated again unless --reuse finds one)."""
    out = out_root / str(n)
    vars_path = out / "vars.json"
    if reuse and vars_path.exists():
        return json.loads(vars_path.read_text()), out, 0.0
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    vars_ = generate(out, n)
    vars_path.write_text(json.dumps(vars_))
    return vars_, out, time.perf_counter() - t0


def _summary(runs: list[dict]) -> dict:
    return {f"{m}_median": _median([r[m] for r in runs]) for m in MEASURES}


def _ratios(runs: list[dict], base: list[dict]) -> dict:
    out = {}
    for m in MEASURES:
        r = [a[m] / b[m] for a, b in zip(runs, base, strict=False)]
        out[f"ratio_{m}_median"], out[f"ratio_{m}_range"] = _median(r), [min(r), max(r)]
    return out


def _memory_limit(vars_: dict) -> str:
    """The DuckDB memory_limit the build of this study ran under (the project's plugin
    sizes it from the input's rows unless $LOOKAHEAD_DUCKDB_MEMORY_LIMIT is set)."""
    return os.environ.get(MEMORY_LIMIT_ENV) or sized_memory_limit(vars_["data_path"])


def compare(
    n: int,
    out_root: Path,
    pairs: int,
    full_build: bool,
    floors: bool = False,
    full_each_pair: bool = False,
    reuse: bool = False,
    warm_up: bool = True,
    left_out: Sequence[str] = tuple(AS_RUN),
) -> dict:
    """Alternating pairs: bare script, then dbt build without EXCLUDED (the bare script
    has none of it), then (floors) the FLOORS builds, then (full_each_pair) the whole
    build; then, once, the whole build unless it ran in each pair."""
    vars_, out, gen = study(n, out_root, reuse)
    vars_path = out / "vars.json"
    db = out / "bench.duckdb"
    if warm_up:  # the first build parses the project (vars changed); at 10,000,000 rows that is noise
        dbt_build(vars_, db, EXCLUDED, list(left_out))
    load0 = os.getloadavg()
    runs_bare, runs_dbt, runs_full = [], [], []
    runs_floor: dict[str, list[dict]] = {name: [] for name in (FLOORS if floors else ())}
    for _ in range(pairs):
        runs_bare.append(bare(vars_path, out / "bare.json"))
        runs_dbt.append(dbt_build(vars_, db, EXCLUDED, list(left_out)))
        for name, runs in runs_floor.items():
            runs.append(dbt_build(vars_, db, EXCLUDED, FLOORS[name]))
        if full_each_pair:
            runs_full.append(dbt_build(vars_, db))
    load1 = os.getloadavg()
    failed = [
        f"{name} (return code {r['returncode']})"
        for name, runs in (("bare script", runs_bare), ("dbt build", runs_dbt), ("whole build", runs_full), *runs_floor.items())
        for r in runs
        if r["returncode"]
    ]
    if failed:  # what was measured is kept, with what failed (its output is above)
        print(f"{n} rows: {', '.join(failed)} failed")
        return {
            "rows": n,
            "failed": failed,
            "bare_runs": runs_bare,
            "dbt_runs": runs_dbt,
            "full_runs": runs_full,
            "loadavg_before": load0,
            "loadavg_after": load1,
        }
    gap = coefficient_gap(db, out / "bare.json") if not runs_full else None
    slim = [{k: r[k] for k in (*MEASURES, "returncode")} for r in runs_dbt]
    res = {
        "rows": n,
        "generate_s": gen,
        "pairs": pairs,
        "duckdb_memory_limit": _memory_limit(vars_),
        "bare_runs": runs_bare,
        "dbt_runs": slim,
        **{f"bare_{k}": v for k, v in _summary(runs_bare).items()},
        **{f"dbt_{k}": v for k, v in _summary(runs_dbt).items()},
        **_ratios(runs_dbt, runs_bare),
        "max_abs_coefficient_gap": gap,
        "dbt_excluded": EXCLUDED,
        "dbt_left_out": list(left_out),
        "wild_bootstrap_draws": WILD_DRAWS,
        "dbt_last_run": runs_dbt[-1],
        "loadavg_before": load0,
        "loadavg_after": load1,
    }
    for name, runs in runs_floor.items():
        res[f"floor_{name}"] = {
            "dbt_args": FLOORS[name],
            "runs": [{k: r[k] for k in MEASURES} for r in runs],
            **_summary(runs),
            **_ratios(runs, runs_bare),
            "last_run": runs[-1],
        }
    if runs_full:
        res["full_build"] = {
            "runs": [{k: r[k] for k in MEASURES} for r in runs_full],
            **_summary(runs_full),
            **_ratios(runs_full, runs_bare),
            "last_run": runs_full[-1],
        }
        res["max_abs_coefficient_gap"] = coefficient_gap(db, out / "bare.json")
    elif full_build:
        res["full_build"] = dbt_build(vars_, db)
    return res


def growth(sizes: list[dict]) -> list[dict]:
    """Growth exponents of each median between consecutive sizes: log(b / a) / log(rows_b / rows_a)."""
    out = []
    for a, b in itertools.pairwise(sizes):
        step = math.log(b["rows"] / a["rows"])
        out.append(
            {
                "from_rows": a["rows"],
                "to_rows": b["rows"],
                **{
                    f"{side}_{m}_exponent": math.log(b[f"{side}_{m}_median"] / a[f"{side}_{m}_median"]) / step
                    for side in ("bare", "dbt")
                    for m in MEASURES
                },
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[91_361])
    ap.add_argument("--pairs", type=int, default=3, help="alternating bare/dbt pairs per size")
    ap.add_argument("--full", action="store_true", help="also 1,000,000 rows")
    ap.add_argument(
        "--no-full-build", action="store_true", help="skip the last, whole build (paper tables and bootstrap included)"
    )
    ap.add_argument(
        "--full-each-pair",
        action="store_true",
        help="the whole build in each pair (after the timed dbt build) instead of once at the end",
    )
    ap.add_argument(
        "--full-each-pair-up-to",
        type=int,
        default=0,
        metavar="ROWS",
        help="--full-each-pair for the sizes up to ROWS only (the larger ones as without it)",
    )
    ap.add_argument(
        "--floors", action="store_true", help="in each pair also the same build without any test, and dbt's start alone"
    )
    ap.add_argument("--reuse", action="store_true", help="reuse a study generated earlier under --tmp")
    ap.add_argument(
        "--no-warm-up", action="store_true", help="no untimed build first (it parses the project; negligible at 10,000,000 rows)"
    )
    ap.add_argument("--unit-tests", action="store_true", help="the timed build runs the unit tests too")
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/lookahead_bench"), help="generated data")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "dbt_build.json")
    args = ap.parse_args()
    sizes = sorted(set(args.sizes) | ({1_000_000} if args.full else set()))
    results = {
        "command": " ".join(["benchmarks/bench_dbt_build.py", *sys.argv[1:]]),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "duckdb_memory_limit": os.environ.get(MEMORY_LIMIT_ENV, "sized per study by the plugin (each size's own)"),
        "sizes": [],
    }
    for n in sizes:
        r = compare(
            n,
            args.tmp,
            args.pairs,
            full_build=not args.no_full_build,
            floors=args.floors,
            full_each_pair=args.full_each_pair or n <= args.full_each_pair_up_to,
            reuse=args.reuse,
            warm_up=not args.no_warm_up,
            left_out=() if args.unit_tests else AS_RUN,
        )
        results["sizes"].append(r)
        listed = ("dbt_last_run", "full_build", "bare_runs", "dbt_runs", "full_runs")
        print(json.dumps({k: v for k, v in r.items() if k not in listed and not k.startswith("floor_")}))
        for name in FLOORS if args.floors and "failed" not in r else ():
            f = r[f"floor_{name}"]
            print(f"floor {name}: {f['wall_s_median']:.1f} s, {f['ratio_wall_s_median']:.2f}x the bare script")
        results["growth"] = growth([r for r in results["sizes"] if "failed" not in r])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))  # after each size: a long run keeps what it measured
    for g in results["growth"]:
        print(json.dumps(g))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
