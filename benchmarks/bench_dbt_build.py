"""Benchmark: `dbt build` wall time and peak memory at the paper's scale and at 1M rows.

A synthetic study in the raw-JSONL contract is generated with DuckDB (fast, and the
same SQL engine the project uses): the paper's 91,361 rows over 1,587 entities and
about 3,000 dates, and 1,000,000 rows. Each `dbt build` runs in a child process; peak
memory is the child's max RSS (getrusage), wall time is measured around it.

    .venv/bin/python benchmarks/bench_dbt_build.py [--sizes 91361 1000000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]


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
    con.execute(f"copy (select row_id, entity_id, entity_name, ticker, text, text_date, target_date, outcome from obs) to '{out}/observations.csv' (header)")
    con.execute(f"""
        copy (
            select sha256('forecast|bench|' || row_id) as key, 'forecast' as task, 'bench' as model_id,
                   'bench' as backend, row_id, 'prompt ' || row_id as prompt,
                   {{'temperature': 0}} as params, label as response_text, 0.9 as first_token_prob,
                   false as approximated, '2026-01-01T00:00:00Z' as finished_at
            from obs
        ) to '{raw}/forecast.jsonl' (format json)
    """)
    con.execute(f"""
        copy (
            with pairs as (
                select entity_id, target_date, any_value(lap) as lap, any_value(label) as label
                from obs group by entity_id, target_date
            )
            select sha256('recall|bench|' || entity_id || '|' || target_date) as key, 'recall' as task,
                   'bench' as model_id, 'bench' as backend, entity_id, strftime(target_date, '%Y-%m-%d') as target_date,
                   'recall prompt' as prompt, {{'temperature': 0, 'max_tokens': 1, 'top_logprobs': 20}} as params,
                   label as response_text,
                   [{{'token_id': 1, 'token': ' up', 'logprob': ln(case when label = 'up' then lap * 0.8 else lap * 0.2 end)}},
                    {{'token_id': 2, 'token': ' down', 'logprob': ln(case when label = 'up' then lap * 0.2 else lap * 0.8 end)}},
                    {{'token_id': 3, 'token': ' unknown', 'logprob': ln(0.99 - lap)}}]
                   || list_transform(range(17), x -> {{'token_id': 100 + x, 'token': 'w' || x, 'logprob': ln(0.0005)}}) as top_logprobs,
                   false as approximated, '2026-01-01T00:00:00Z' as finished_at
            from pairs
        ) to '{raw}/recall.jsonl' (format json)
    """)
    con.execute(f"""
        copy (
            select sha256('mink|bench|' || row_id) as key, 'mink' as task, 'bench' as model_id, 'bench' as backend,
                   row_id, 'prompt ' || row_id as prompt, {{'k': 0.2}} as params,
                   [{{'token_id': 0, 'token': '<s>', 'logprob': null}}]
                   || list_transform(range(30), x -> {{'token_id': x + 1, 'token': 't', 'logprob': ln(0.01 + 0.9 * lap * ((x % 7) + 1) / 7)}}) as prompt_logprobs,
                   false as approximated, '2026-01-01T00:00:00Z' as finished_at
            from obs
        ) to '{raw}/mink.jsonl' (format json)
    """)
    cutoff = con.sql("select quantile_disc(target_date, 0.8) from obs").fetchone()[0]
    con.close()
    return {
        "study_name": f"bench_{n_rows}", "data_path": str(out / "observations.csv"), "raw_dir": str(raw),
        "model_id": "bench", "training_cutoff": str(cutoff), "period_frequency": "trading_day",
        "bootstrap_draws": 200,
    }


def timed_build(vars_: dict, db: Path) -> tuple[float, float, int]:
    env = dict(os.environ, DBT_PROFILES_DIR=str(ROOT / "profiles"), DBT_SEND_ANONYMOUS_USAGE_STATS="False",
               LOOKAHEAD_DUCKDB=str(db), PYTHONPATH=str(ROOT), GX_ANALYTICS_ENABLED="False")
    dbt = Path(sys.executable).with_name("dbt")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([str(dbt), "build", "--vars", json.dumps(vars_)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode:
        print(proc.stdout[-3000:])
    return wall, max(peak_kb, before) / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[91_361, 1_000_000])
    ap.add_argument("--out", type=Path, default=Path("/tmp/lookahead_bench"))
    args = ap.parse_args()
    for n in args.sizes:
        out = args.out / str(n)
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        vars_ = generate(out, n)
        gen = time.perf_counter() - t0
        wall, peak_mb, rc = timed_build(vars_, out / "bench.duckdb")
        print(json.dumps({"rows": n, "generate_s": round(gen, 1), "dbt_build_s": round(wall, 1),
                          "peak_rss_mb": round(peak_mb), "returncode": rc}))


if __name__ == "__main__":
    main()
