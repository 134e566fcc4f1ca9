"""Benchmark: the protocol path at growing sizes, and how its time and memory grow.

For each size (default 100,000, 1,000,000 and 10,000,000 rows) a synthetic study in the
raw-JSONL contract is generated (`bench_dbt_build.generate`: 1,587 entities, 3,000
dates), then, each in a child process:

1. the protocol path: the whole `dbt build` (every gate and data test, the regressions,
   the verdict and the paper tables) with `bootstrap_draws: 0`; wall time, peak RSS
   (os.wait4), dbt's per-node times (run_results.json) and the largest RSS sampled
   while each node ran (every 0.2 s from /proc; two nodes run at once, so a node's
   figure is the process's RSS while it ran, not its own share);
2. the paper's pairs bootstrap on its own (`--draws`, default the paper's 10,000), the
   very function the `bootstrap_results` model calls, on the built database's
   out-of-sample panel.

The growth exponent of time and of peak memory is the least-squares slope of log(value)
on log(rows) over the sizes (1 = linear); a linear fit value = a + b x rows is given too.
The load average before and after each run is recorded: on a shared machine wall times
move with it, peak memory does not.

    python benchmarks/bench_scale.py [--sizes 100000 1000000 10000000] [--draws 10000]
        [--tmp /tmp/lookahead_scale] [--reuse] [--out benchmarks/results/scale.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from bench_dbt_build import ROOT, _env, generate

DEFAULT_SIZES = (100_000, 1_000_000, 10_000_000)


class RssSampler:
    """RSS and CPU time (user + system) of one process and its children, sampled every
    `every` seconds, with times."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []  # (unix time, MiB)
        self.cpu: list[tuple[float, float]] = []  # (unix time, CPU seconds so far)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        pids, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            pids.append(p)
            with contextlib.suppress(OSError):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        return pids

    def _run(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.is_set():
            total, cpu = 0.0, 0.0
            for p in self._tree():
                try:
                    for line in Path(f"/proc/{p}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) / 1024
                    stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
                    cpu += (int(stat[11]) + int(stat[12])) / tick  # utime + stime
                except (OSError, IndexError, ValueError):
                    pass
            if total:
                now = time.time()
                self.samples.append((now, total))
                self.cpu.append((now, cpu))
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def max_between(self, t0: float, t1: float) -> float | None:
        vals = [m for t, m in self.samples if t0 - self.every <= t <= t1 + self.every]
        return round(max(vals), 1) if vals else None


def run_child(cmd: list[str], env: dict[str, str]) -> dict:
    """Wall seconds, peak RSS (MiB, os.wait4: the child alone), RSS samples, output tail."""
    load0 = os.getloadavg()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = RssSampler(proc.pid)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    sampler.stop()
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "returncode": os.waitstatus_to_exitcode(status),
        "loadavg_before": load0,
        "loadavg_after": os.getloadavg(),
        "_sampler": sampler,
        "_tail": out[-4000:],
    }


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def protocol_build(vars_: dict, db: Path) -> dict:
    """The whole `dbt build` with the bootstrap off; per-node time and RSS while it ran."""
    target = db.parent / "target"
    dbt = Path(sys.executable).with_name("dbt")
    cmd = [str(dbt), "build", "--vars", json.dumps({**vars_, "bootstrap_draws": 0}), "--target-path", str(target)]
    res = run_child(cmd, _env(db))
    sampler, tail = res.pop("_sampler"), res.pop("_tail")
    if res["returncode"]:
        print(tail)
    rr_path = target / "run_results.json"
    if rr_path.exists():
        rr = json.loads(rr_path.read_text())
        nodes = []
        for r in rr["results"]:
            ex = [t for t in r.get("timing", []) if t.get("name") == "execute" and t.get("started_at")]
            uid = r["unique_id"]
            name = ("test." if uid.startswith("test.") else "") + uid.split(".")[-1]
            rss = sampler.max_between(_ts(ex[0]["started_at"]), _ts(ex[0]["completed_at"])) if ex else None
            nodes.append({"node": name, "s": round(r["execution_time"], 3), "rss_mib_while_running": rss})
        res["dbt_elapsed_s"] = round(rr.get("elapsed_time", math.nan), 2)
        res["tests_n"] = sum(1 for n in nodes if n["node"].startswith("test."))
        res["tests_s"] = round(sum(n["s"] for n in nodes if n["node"].startswith("test.")), 2)
        models = [n for n in nodes if not n["node"].startswith("test.")]
        res["slowest_models"] = sorted(models, key=lambda n: -n["s"])[:12]
        res["largest_rss_models"] = sorted(models, key=lambda n: -(n["rss_mib_while_running"] or 0))[:8]
    return res


BOOTSTRAP_CHILD = """
import json, sys, time
import duckdb, pandas as pd
from lookahead.paper.dbt_entry import bootstrap_frame, panel_columns
from lookahead.stats.panel_io import read_columns
db, draws = sys.argv[1], int(sys.argv[2])
con = duckdb.connect(db, read_only=True)
settings = con.sql("select * from study_settings").df()
study = json.loads(settings["settings_json"].iloc[0])
study.paper.bootstrap_draws = draws
settings["settings_json"] = json.dumps(study)
cols = panel_columns(settings)
pre = read_columns(con.table("panel_pre"), cols)
post = read_columns(con.table("panel_post"), cols)
t0 = time.perf_counter()
frame = bootstrap_frame(settings, pre, post)
sec = time.perf_counter() - t0
print(json.dumps({"bootstrap_s": sec, "draws": len(frame), "n_obs": int(frame["n_obs"].iloc[0]) if len(frame) else 0,
                  "method": str(frame["method"].iloc[0]) if len(frame) else None,
                  "p_value": float(frame["p_value"].iloc[0]) if len(frame) else None}))
"""


def synthetic_panel(db: Path, n_rows: int, vars_: dict, n_entities: int = 1587, n_dates: int = 3000, seed: int = 1) -> None:
    """panel_pre, panel_post and study_settings written straight by DuckDB (no LLM caches,
    no dbt): the analysis panel's contract columns with the same design as `generate`
    (entities, trading days, outcome, recall probabilities, the cutoff at the 80th
    percentile of target dates), for sizes where generating and keying the raw caches
    would take hours."""
    import duckdb

    con = duckdb.connect(str(db))
    con.execute(f"select setseed({seed / 10})")
    con.execute(f"""
        create or replace table panel as
        with base as (
            select i, cast(floor(random() * {n_entities}) as integer) as e,
                   cast(floor(random() * {n_dates}) as integer) as d,
                   random() as u1, random() as u2, random() as u3, random() as u4
            from range({n_rows}) as t(i)
        ), rows as (
            select 'r' || i as row_id, e + 1 as entity_num, date '2012-01-02' + d as text_date,
                   date '2012-01-02' + d + 1 as target_date, d + 1 as period_num,
                   (u1 - 0.5) + 0.2 * (u2 - 0.5) as outcome,
                   case when u2 > 0.5 then 1.0 else -1.0 end as mu_hat,
                   0.05 + 0.9 * u3 as lap_recall,
                   case when u2 > 0.5 then 0.8 else 0.2 end * (0.05 + 0.9 * u3) as p_up,
                   case when u2 > 0.5 then 0.2 else 0.8 end * (0.05 + 0.9 * u3) as p_down,
                   -2.0 - u4 + 0.5 * u3 as lap_mink, 0.5 + 0.49 * u4 as first_token_prob
            from base
        ), cut as (select quantile_disc(target_date, 0.8) as c from rows)
        select rows.*, p_up - p_down as ud, lap_recall as lap,
               case when target_date <= cut.c then 'pre' else 'post' end as sample,
               false as up_censored, false as down_censored, false as approximated,
               cast(null as double) as stated_confidence
        from rows, cut
    """)
    cutoff = con.sql("select max(target_date) from panel where sample = 'pre'").fetchone()[0]
    for sample in ("pre", "post"):
        con.execute(f"""
            create or replace table panel_{sample} as
            select panel.*, case when lap > m.med then 1 else 0 end as high_lap
            from panel, (select median(lap) as med from panel where sample = '{sample}') as m
            where sample = '{sample}'
        """)
    settings = json.dumps({**vars_, "training_cutoff": str(cutoff)})
    con.execute("create or replace table study_settings as select ? as settings_json", [settings])
    con.execute("drop table panel")
    con.close()


MODELS_CHILD = """
import json, resource, sys, time
import duckdb
from lookahead.paper.dbt_entry import paper_tables_frame, panel_columns
from lookahead.stats.panel_io import read_columns
from lookahead.stats.protocol import StatsSections, protocol_columns, run_protocol
from lookahead.stats.verdict import VERDICT_COLUMNS, verdict_frame
con = duckdb.connect(sys.argv[1], read_only=True)
steps, t = {}, time.perf_counter()
def mark(name):
    global t
    now = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    steps[name] = {"s": round(now - t, 2), "peak_rss_mib_so_far": round(peak, 1)}
    t = now
settings = con.sql("select * from study_settings").df()
stats = StatsSections.from_frame(settings)
pre, post = (read_columns(con.table(f"panel_{s}"), protocol_columns(stats)) for s in ("pre", "post"))
results = run_protocol(pre, post, stats)
del pre, post
mark("regression_results")
pre, post = (read_columns(con.table(f"panel_{s}"), VERDICT_COLUMNS) for s in ("pre", "post"))
verdict = verdict_frame(results, pre, post, stats)
del pre, post
mark("verdict")
cols = panel_columns(settings)
pre, post = (read_columns(con.table(f"panel_{s}"), cols) for s in ("pre", "post"))
paper = paper_tables_frame(settings, pre, post)
mark("paper_tables")
det = results[(results["spec"] == "detection") & (results["sample"] == "pre") & (results["term"] == "mu_hat:lap")]
print(json.dumps({"steps": steps, "rows_pre": int(verdict["n_rows_pre"].iloc[0]), "verdict": str(verdict["verdict"].iloc[0]),
                  "beta3": float(det["estimate"].iloc[0]), "paper_rows": len(paper)}))
"""


def _child_json(code: str, db: Path, *args: str) -> dict:
    """Run `code` in a child process on `db` (run_child's time and memory) and add the
    figures it prints as JSON on its last line (its output is shown when there is none)."""
    res = run_child([sys.executable, "-c", code, str(db), *args], _env(db))
    res.pop("_sampler")
    tail = res.pop("_tail")
    try:
        res.update(json.loads(tail.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        print(tail)
    return res


def models_alone(db: Path) -> dict:
    """The four statistics models' functions (regressions, verdict, paper tables) in one
    process, reading the panel as the dbt models do (only the columns each uses)."""
    return _child_json(MODELS_CHILD, db)


DRAWS_CHILD = """
import json, resource, sys, time
import duckdb
from lookahead.paper import bootstrap as bs
from lookahead.paper import tables as T
from lookahead.paper.dbt_entry import panel_columns, settings_from_frame
from lookahead.stats.panel_io import read_columns
db, draws = sys.argv[1], int(sys.argv[2])
con = duckdb.connect(db, read_only=True)
settings = con.sql("select * from study_settings").df()
s = settings_from_frame(settings)[0]
post, _ = T.out_of_sample(read_columns(con.table("panel_post"), panel_columns(settings)), s)
y, _, full = T.table5_terms(s)
t0 = time.perf_counter()
data = bs.prepare(T.table5_inputs(post, s), y, full, s.fixed_effects)
d = bs.fast_draws(data, draws, seed=1)
sec = time.perf_counter() - t0
print(json.dumps({"draws_s": sec, "draws": draws, "n_obs": data.n, "dense": bool(data._structure.dense),
                  "finite": int((d == d).sum()),
                  "peak_rss_mib_in_child": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def draws_alone(db: Path, draws: int) -> dict:
    """Only the bootstrap's draws (`fast_draws` on Table V's out-of-sample rows), without
    the Table V regressions `bootstrap_frame` fits first: for sizes whose regressions do
    not fit in this machine's memory."""
    return _child_json(DRAWS_CHILD, db, str(draws))


def bootstrap_alone(db: Path, draws: int) -> dict:
    """The paper's pairs bootstrap (bootstrap_frame, as the dbt model calls it) on its own."""
    return _child_json(BOOTSTRAP_CHILD, db, str(draws))


def growth(rows: list[int], values: list[float]) -> dict:
    """Slope of log(value) on log(rows) (the growth exponent) and a linear fit a + b n."""
    ok = [(n, v) for n, v in zip(rows, values, strict=False) if v and v > 0 and math.isfinite(v)]
    if len(ok) < 2:
        return {}
    x = np.log([n for n, _ in ok])
    y = np.log([v for _, v in ok])
    slope, _icpt = np.polyfit(x, y, 1)
    lin_b, lin_a = np.polyfit([n for n, _ in ok], [v for _, v in ok], 1)
    pairwise = [round(float((y[i + 1] - y[i]) / (x[i + 1] - x[i])), 3) for i in range(len(ok) - 1)]
    return {
        "exponent": round(float(slope), 3),
        "pairwise_exponents": pairwise,
        "linear_fixed": round(float(lin_a), 3),
        "linear_per_row": float(lin_b),
        "sizes": len(ok),
    }


def _fits(entries: list[dict], stage: str, keys: tuple[str, ...]) -> dict:
    ok = [e for e in entries if e.get(stage, {}).get("returncode") == 0]
    return {k: growth([e["rows"] for e in ok], [e[stage].get(k) for e in ok]) for k in keys}


def default_study_panel(out: Path, n: int) -> Path:
    """``out``/panel.duckdb: a synthetic panel of n rows under the default study's settings."""
    from lookahead.config import default_study_path, read_study_file

    vars_ = {
        **read_study_file(default_study_path()),
        "study_name": f"scale_{n}",
        "model_id": "bench",
        "period_frequency": "trading_day",
    }
    db = out / "panel.duckdb"
    synthetic_panel(db, n, vars_)
    return db


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=list(DEFAULT_SIZES),
        help="sizes for the statistics models (and the bootstrap) on a DuckDB-made panel",
    )
    ap.add_argument(
        "--dbt-sizes",
        type=int,
        nargs="*",
        default=[100_000, 1_000_000],
        help="sizes for the whole dbt build from generated raw caches",
    )
    ap.add_argument("--draws", type=int, default=10_000, help="bootstrap draws timed on their own (0: skip)")
    ap.add_argument(
        "--draws-only-sizes",
        type=int,
        nargs="*",
        default=[],
        help="sizes where only the bootstrap draws run (no regressions), --draws of them",
    )
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/lookahead_scale"), help="generated data (deleted after)")
    ap.add_argument("--reuse", action="store_true", help="reuse raw caches generated by an earlier run")
    ap.add_argument("--keep", action="store_true", help="keep the generated data and databases")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale.json")
    args = ap.parse_args()
    results: dict = {"cpus": os.cpu_count(), "python": platform.python_version()}
    measured: dict[str, list[dict]] = {"dbt_build": [], "models": [], "draws_only": []}
    command = " ".join(["benchmarks/bench_scale.py", *sys.argv[1:]])

    def save() -> None:
        """Merge this run's entries into the results file (sizes measured by other calls are
        kept unless re-measured here), refit the growth, write; after every run, so a long
        call keeps what it measured."""
        old = json.loads(args.out.read_text()) if args.out.exists() else {}
        for key in ("dbt_build", "models", "draws_only"):
            mine = {e["rows"] for e in measured[key]}
            for e in measured[key]:
                e["command"] = command
            results[key] = sorted([e for e in old.get(key, []) if e["rows"] not in mine] + measured[key], key=lambda e: e["rows"])
        results["growth"] = {
            "dbt_build": _fits(results["dbt_build"], "protocol", ("wall_s", "peak_rss_mib")),
            "models": _fits(results["models"], "protocol", ("wall_s", "peak_rss_mib")),
            "bootstrap": _fits(results["models"], "bootstrap", ("bootstrap_s", "peak_rss_mib")),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))

    for n in args.dbt_sizes:
        out = args.tmp / "dbt" / str(n)
        vars_path = out / "vars.json"
        entry: dict = {"rows": n}
        if args.reuse and vars_path.exists():
            vars_ = json.loads(vars_path.read_text())
        else:
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            vars_ = generate(out, n)
            entry["generate_s"] = round(time.perf_counter() - t0, 1)
            vars_path.write_text(json.dumps(vars_))
        db = out / "scale.duckdb"
        db.unlink(missing_ok=True)
        entry["protocol"] = protocol_build(vars_, db)
        print(
            json.dumps(
                {
                    "dbt_build": n,
                    **{k: entry["protocol"].get(k) for k in ("wall_s", "peak_rss_mib", "returncode", "loadavg_before")},
                }
            ),
            flush=True,
        )
        measured["dbt_build"].append(entry)
        save()
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    for n in args.sizes:
        out = args.tmp / "models" / str(n)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        t0 = time.perf_counter()
        db = default_study_panel(out, n)
        entry = {"rows": n, "generate_s": round(time.perf_counter() - t0, 1)}
        entry["protocol"] = models_alone(db)
        print(
            json.dumps({"models": n, **{k: entry["protocol"].get(k) for k in ("wall_s", "peak_rss_mib", "returncode", "steps")}}),
            flush=True,
        )
        if args.draws and entry["protocol"]["returncode"] == 0:
            entry["bootstrap"] = bootstrap_alone(db, args.draws)
            print(json.dumps({"bootstrap": n, **entry["bootstrap"]}), flush=True)
        measured["models"].append(entry)
        save()
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    for n in args.draws_only_sizes:
        out = args.tmp / "draws" / str(n)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        db = default_study_panel(out, n)
        entry = {"rows": n, "draws_only": draws_alone(db, args.draws)}
        print(json.dumps(entry), flush=True)
        measured["draws_only"].append(entry)
        save()
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    save()
    print(json.dumps(results["growth"], indent=1))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
