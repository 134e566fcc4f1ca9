"""A fully cached re-run of the demo study: where the seconds go.

`lookahead run --study demo/studies/contaminated.yml --yes` once to fill the caches (the
baseline: the run that queries), then --runs re-runs with every answer cached, each
phase timed on its own in a child process (jobs, dbt build, report) next to the whole
`lookahead run`; dbt's per-node times come from target/run_results.json and the jobs'
heaviest imports from `python -X importtime`. Writes benchmarks/results/cached_rerun.json.

    python benchmarks/bench_cached_rerun.py [--study demo/studies/contaminated.yml] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return wall, proc.stdout + proc.stderr


def heaviest_imports(cmd: list[str], env: dict[str, str], top: int = 12) -> list[tuple[str, float]]:
    """Top-level packages by cumulative import time (python -X importtime), seconds."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=ROOT, env=env, capture_output=True, text=True)
    tops: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)", line)
        if m and m.group(2) == " ":  # a top-level import (one space of indentation)
            name = m.group(3).split(".")[0]
            tops[name] = tops.get(name, 0.0) + int(m.group(1)) / 1e6
    return sorted(tops.items(), key=lambda kv: -kv[1])[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="demo/studies/contaminated.yml")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cached_rerun.json")
    a = ap.parse_args()
    from lookahead.cli import dbt_env

    env = dbt_env()
    lookahead = [sys.executable, "-m", "lookahead.cli"]
    first, out = timed([*lookahead, "run", "--study", a.study, "--yes"], env)
    load0 = os.getloadavg()
    phases: dict[str, list[float]] = {"run": [], "jobs": [], "build": [], "report": []}
    for _ in range(a.runs):
        for phase in phases:
            args = [phase, "--study", a.study] + (["--yes"] if phase in ("jobs", "run") else [])
            wall, text = timed([*lookahead, *args], env)
            if phase == "jobs" and re.search(r"to query: [1-9]", text):
                raise SystemExit(f"the re-run queried again:\n{text}")
            phases[phase].append(wall)
    load1 = os.getloadavg()
    rr = json.loads((ROOT / "target" / "run_results.json").read_text())
    nodes = sorted(((r["unique_id"].split(".")[-1] if not r["unique_id"].startswith("test.")
                     else "test:" + r["unique_id"].split(".")[2],
                     round(r["execution_time"], 3)) for r in rr["results"]), key=lambda kv: -kv[1])
    res = {
        "command": " ".join(["benchmarks/bench_cached_rerun.py", *sys.argv[1:]]),
        "study": a.study, "python": platform.python_version(), "cpus": os.cpu_count(),
        "first_run_s": first, "runs": a.runs,
        "cached_median_s": {k: statistics.median(v) for k, v in phases.items()},
        "cached_all_s": phases,
        "ratio_cached_run_to_first_run": statistics.median(phases["run"]) / first,
        "dbt_elapsed_s": rr.get("elapsed_time"),
        "dbt_tests_s": sum(t for n, t in nodes if n.startswith("test:")),
        "dbt_nodes_s": [kv for kv in nodes if not kv[0].startswith("test:")][:15],
        "jobs_heaviest_imports_s": heaviest_imports([sys.executable, "-m", "llm_jobs.run_all", "--study", a.study, "--yes"], env),
        "loadavg_before": load0, "loadavg_after": load1,
    }
    print(json.dumps({k: v for k, v in res.items() if k != "cached_all_s"}, indent=1))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
