"""Benchmark: `dbt build` of one generated study by two commits, run alternately.

What a change did to the build, as a ratio against the commit before it on the same
study and the same machine load: the base commit is checked out into a git worktree
(sharing this checkout's virtual environment), then base and head build the study in
turn, each into its own database, measured as benchmarks/bench_dbt_build.py measures
(wall, CPU-seconds of the process tree, peak memory), with the same exclusions (paper
tables, bootstrap, lap_robustness, the claim models). The study is one that
bench_dbt_build.py generated (its folder holds vars.json and the raw files).

    python benchmarks/ab_build.py --base REV --study /tmp/lookahead_pairs/91361 [--pairs 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dbt_build import EXCLUDED, MEASURES, _env, _run

ROOT = Path(__file__).resolve().parents[1]


def _worktree(rev: str, path: Path) -> None:
    if path.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(path), rev],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (path / ".venv").symlink_to(ROOT / ".venv")


def build(checkout: Path, study: Path, side: str) -> dict:
    db = study / f"ab_{side}.duckdb"
    for stale in study.glob(f"ab_{side}.duckdb*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    cmd = [
        str(ROOT / ".venv" / "bin" / "dbt"),
        "build",
        "--vars",
        (study / "vars.json").read_text(),
        "--project-dir",
        str(checkout),
        "--target-path",
        str(study / f"target_{side}"),
        "--exclude",
        *EXCLUDED,
    ]
    wall, cpu, peak, rc, tail = _run(cmd, _env(db, checkout))
    if rc:
        print(tail)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak, "returncode": rc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the commit to compare against (any git revision)")
    ap.add_argument("--study", type=Path, required=True, help="a study folder bench_dbt_build.py generated")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--worktree", type=Path, default=Path("/tmp/lookahead_ab_base"))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    base_sha = subprocess.run(["git", "rev-parse", a.base], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    head_sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    _worktree(base_sha, a.worktree)
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    try:
        for i in range(a.pairs):
            for side, checkout in (("base", a.worktree), ("head", ROOT)):
                runs[side].append(build(checkout, a.study, side))
                print(f"pair {i + 1} {side}: " + ", ".join(f"{m} {runs[side][-1][m]:.1f}" for m in MEASURES), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(a.worktree)], cwd=ROOT, check=False)
    result = {
        "command": " ".join(["benchmarks/ab_build.py", *sys.argv[1:]]),
        "base": base_sha,
        "head": head_sha,
        "study": str(a.study),
        "excluded": EXCLUDED,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "runs": runs,
        "medians": {side: {m: statistics.median(r[m] for r in rs) for m in MEASURES} for side, rs in runs.items()},
        "ratio_head_over_base": {m: [h[m] / b[m] for b, h in zip(runs["base"], runs["head"], strict=False)] for m in MEASURES},
    }
    print(json.dumps(result["medians"], indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
