"""A fully cached re-run of the demo study: where the seconds go.

`lookahead run --study demo/studies/contaminated.yml --yes` once to fill the caches (the
run that queries), then --runs rounds with every answer cached, each round timing in
child processes, one after the other: the whole `lookahead run` (which skips dbt build
when the last build is up to date), `lookahead run --rebuild` (the same with dbt build
forced), and the jobs and the report on their own. With --baseline-dir (an export of an
earlier commit whose demo/raw holds the same caches) each round starts with that tree's
`lookahead run`, so old and new alternate under the same load. Wall and CPU seconds
(user + system of the children: less sensitive to other processes than wall) are both
recorded. dbt's per-node times come from target/run_results.json and the jobs' heaviest
imports from `python -X importtime`. Writes benchmarks/results/cached_rerun.json.

    python benchmarks/bench_cached_rerun.py [--study demo/studies/contaminated.yml] [--runs 3]
        [--baseline-dir /tmp/base]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, output) of one command; exits on failure."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return wall, cpu, proc.stdout + proc.stderr


def heaviest_imports(cmd: list[str], env: dict[str, str], top: int = 12) -> list[tuple[str, float]]:
    """Top-level packages by cumulative import time (python -X importtime), seconds."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=ROOT, env=env, capture_output=True, text=True)
    tops: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)", line)
        if m and m.group(2) == "":  # a top-level import (no indentation after the bar)
            name = m.group(3).split(".")[0]
            tops[name] = tops.get(name, 0.0) + int(m.group(1)) / 1e6
    return sorted(tops.items(), key=lambda kv: -kv[1])[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="demo/studies/contaminated.yml")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--baseline-dir", type=Path, default=None, help="an export of an earlier commit to alternate with (same demo caches)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cached_rerun.json")
    a = ap.parse_args()
    from lookahead.children import dbt_env

    env = {**dbt_env(), "PWD": str(ROOT)}  # profiles.yml's module_paths reads PWD
    lookahead = [sys.executable, "-m", "lookahead.cli"]
    study = ["--study", a.study]
    first, _, out = timed([*lookahead, "run", *study, "--yes"], env)
    load0 = os.getloadavg()
    phases = {
        "run": ["run", "--yes"],
        "run_rebuild": ["run", "--yes", "--rebuild"],
        "jobs": ["jobs", "--yes"],
        "report": ["report"],
    }
    if a.baseline_dir:
        base = a.baseline_dir.resolve()
        base_env = {
            **env,
            "PYTHONPATH": str(base),
            "DBT_PROFILES_DIR": str(base / "profiles"),
            "MPLCONFIGDIR": str(base / ".mplconfig"),
            "PWD": str(base),
        }
        timed([*lookahead, "run", "--study", str(base / a.study), "--yes"], base_env, base)
    wall: dict[str, list[float]] = {k: [] for k in (["baseline_run"] if a.baseline_dir else []) + list(phases)}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    for _ in range(a.runs):
        if a.baseline_dir:
            w, c, _ = timed([*lookahead, "run", "--study", str(base / a.study), "--yes"], base_env, base)
            wall["baseline_run"].append(w)
            cpu["baseline_run"].append(c)
        for phase, args in phases.items():
            w, c, text = timed([*lookahead, args[0], *study, *args[1:]], env)
            if re.search(r"to query: [1-9]", text):
                raise SystemExit(f"the re-run queried again:\n{text}")
            if phase == "run" and "build up to date:" not in text:
                raise SystemExit(f"the cached re-run did not find its build up to date:\n{text[-2000:]}")
            wall[phase].append(w)
            cpu[phase].append(c)
    load1 = os.getloadavg()
    rr = json.loads((ROOT / "target" / "run_results.json").read_text())
    nodes = sorted(
        (
            (
                r["unique_id"].split(".")[-1]
                if not r["unique_id"].startswith("test.")
                else "test:" + r["unique_id"].split(".")[2],
                round(r["execution_time"], 3),
            )
            for r in rr["results"]
        ),
        key=lambda kv: -kv[1],
    )
    med = {k: statistics.median(v) for k, v in wall.items()}
    res = {
        "command": " ".join(["benchmarks/bench_cached_rerun.py", *sys.argv[1:]]),
        "study": a.study,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "first_run_s": first,
        "runs": a.runs,
        "cached_median_wall_s": med,
        "cached_median_cpu_s": {k: statistics.median(v) for k, v in cpu.items()},
        "cached_all_wall_s": wall,
        "cached_all_cpu_s": cpu,
        "ratio_cached_run_to_first_run": med["run"] / first,
        "ratio_cached_run_to_baseline_run": (
            [w / b for w, b in zip(wall["run"], wall["baseline_run"], strict=False)] if a.baseline_dir else None
        ),
        "dbt_elapsed_s_last_rebuild": rr.get("elapsed_time"),
        "dbt_tests_s": sum(t for n, t in nodes if n.startswith("test:")),
        "dbt_nodes_s": [kv for kv in nodes if not kv[0].startswith("test:")][:15],
        "jobs_heaviest_imports_s": heaviest_imports([sys.executable, "-m", "llm_jobs.run_all", *study, "--yes"], env),
        "loadavg_before": load0,
        "loadavg_after": load1,
        "first_run_tail": out[-300:],
    }
    print(json.dumps({k: v for k, v in res.items() if not k.startswith("cached_all")}, indent=1))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
