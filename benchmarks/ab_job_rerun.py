"""Benchmark: a fully cached run of each LLM job by two commits, run alternately.

What the jobs' own reading of their lines costs, as a ratio against another commit on
the same study and machine load: the base commit is checked out into a git worktree
(sharing this checkout's virtual environment), then base and head run each job
(forecast, recall, mink) on a study whose every answer is cached, in turn, measured as
benchmarks/bench_dbt_build.py measures a build (wall, CPU-seconds of the process tree,
peak memory). Nothing is asked (every key is cached), so the time is the plan, the cache
lookup and what the job does with its lines afterwards: before issue 47 a parquet
summary of every row, computed in Python; after it, the completeness check and the
forecast's parse rate. The study is one that bench_dbt_build.py generated.

    python benchmarks/ab_job_rerun.py --base REV --study /tmp/lookahead_pairs/91361 [--pairs 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_build import _worktree
from bench_dbt_build import MEASURES, _env, _run

ROOT = Path(__file__).resolve().parents[1]
JOBS = ("forecast", "recall", "mink")


def job(checkout: Path, study: Path, name: str) -> dict:
    """One cached run of the job <name> alone (the job process with --only) by the project
    at `checkout` (the study file is the generated vars.json: JSON is YAML)."""
    # -P: the current folder (this checkout, where the child starts) is not put first on
    # sys.path, so the jobs import `checkout`'s code from PYTHONPATH
    cmd = [
        str(ROOT / ".venv" / "bin" / "python"),
        "-P",
        "-m",
        "llm_jobs.run_all",
        "--only",
        name,
        "--study",
        str(study / "vars.json"),
        "--yes",
    ]
    env = {**_env(study / "unused.duckdb", checkout), "HF_HUB_OFFLINE": "1"}
    wall, cpu, peak, rc, tail = _run(cmd, env)
    if rc or "to query: 0" not in tail:
        raise SystemExit(f"{name} at {checkout}: return code {rc}, not fully cached?\n{tail}")
    # the job's last line says which code ran (a summary's figures, or the completeness line)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak, "returncode": rc, "last_line": tail.strip().splitlines()[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the commit to compare against (any git revision)")
    ap.add_argument("--study", type=Path, required=True, help="a study folder bench_dbt_build.py generated")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--worktree", type=Path, default=Path("/tmp/lookahead_ab_jobs_base"))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    rev = ["git", "rev-parse"]
    base_sha = subprocess.run([*rev, a.base], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    head_sha = subprocess.run([*rev, "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    status = ["git", "status", "--porcelain", "--untracked-files=no"]
    dirty = bool(subprocess.run(status, cwd=ROOT, capture_output=True, text=True).stdout)
    _worktree(base_sha, a.worktree)
    load_before = os.getloadavg()
    runs: dict[str, dict[str, list[dict]]] = {side: {j: [] for j in JOBS} for side in ("base", "head")}
    try:
        for i in range(a.pairs):
            for name in JOBS:
                for side, checkout in (("base", a.worktree), ("head", ROOT)):
                    runs[side][name].append(job(checkout, a.study, name))
                    r = runs[side][name][-1]
                    print(f"pair {i + 1} {name} {side}: " + ", ".join(f"{m} {r[m]:.1f}" for m in MEASURES), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(a.worktree)], cwd=ROOT, check=False)
    result = {
        "command": " ".join(["benchmarks/ab_job_rerun.py", *sys.argv[1:]]),
        "base": base_sha,
        "head": head_sha,
        "head_working_tree_changed": dirty,
        "study": str(a.study),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "runs": runs,
        "medians": {
            side: {name: {m: statistics.median(r[m] for r in rs) for m in MEASURES} for name, rs in by_job.items()}
            for side, by_job in runs.items()
        },
        "ratio_head_over_base": {
            name: {m: [h[m] / b[m] for b, h in zip(runs["base"][name], runs["head"][name], strict=True)] for m in MEASURES}
            for name in JOBS
        },
    }
    print(json.dumps(result["medians"], indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
