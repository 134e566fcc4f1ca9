"""Benchmark: `dbt build` of one generated study by two commits, run alternately.

What a change did to the build, as a ratio against the commit before it on the same
study and the same machine load: the base commit is checked out into a git worktree
(sharing this checkout's virtual environment), then base and head build the study in
turn, each into its own database, measured as benchmarks/bench_dbt_build.py measures
(wall, CPU-seconds of the process tree, peak memory), with the same exclusions (paper
tables, bootstrap, lap_robustness, the claim models). The study is one that
bench_dbt_build.py generated (its folder holds vars.json and the raw files). Each build
keeps its node times (dbt's run_results.json), so a change in wall time is located node
by node. Which commit builds first alternates pair by pair (base first in the odd
pairs, head first in the even ones), so neither side always runs after the other; use
an even --pairs for a balanced order. With --bare each pair starts with the bare script
(benchmarks/bare_protocol.py), so both commits' ratios to it come from the same pairs,
and each build's coefficients are checked against it.

    python benchmarks/ab_build.py --base REV --study /tmp/lookahead_pairs/91361 [--pairs 2] [--bare] [--out FILE]
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
from bench_dbt_build import AS_RUN, EXCLUDED, MEASURES, _env, _run, bare, coefficient_gap

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
        *AS_RUN,
    ]
    wall, cpu, peak, rc, tail = _run(cmd, _env(db, checkout))
    if rc:
        print(tail)
    res = {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak, "returncode": rc}
    run_results = study / f"target_{side}" / "run_results.json"
    if run_results.exists():  # node times, largest first (tests summed)
        rr = json.loads(run_results.read_text())
        nodes = {r["unique_id"]: r["execution_time"] for r in rr["results"]}
        res["dbt_elapsed_s"] = rr.get("elapsed_time")
        res["tests_n"] = sum(1 for k in nodes if k.startswith(("test.", "unit_test.")))
        res["tests_s"] = round(sum(t for k, t in nodes.items() if k.startswith(("test.", "unit_test."))), 3)
        res["nodes_s"] = {
            k.split(".")[-1]: round(t, 3)
            for k, t in sorted(nodes.items(), key=lambda kv: -kv[1])
            if not k.startswith(("test.", "unit_test."))
        }
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the commit to compare against (any git revision)")
    ap.add_argument("--study", type=Path, required=True, help="a study folder bench_dbt_build.py generated")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--bare", action="store_true", help="the bare script first in each pair: both commits' ratios to it")
    ap.add_argument("--worktree", type=Path, default=Path("/tmp/lookahead_ab_base"))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    base_sha = subprocess.run(["git", "rev-parse", a.base], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    head_sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    _worktree(base_sha, a.worktree)
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    bare_runs: list[dict] = []
    gaps: dict[str, list[float]] = {"base": [], "head": []}
    try:
        for i in range(a.pairs):
            if a.bare:
                bare_runs.append(bare(a.study / "vars.json", a.study / "bare.json"))
                print(f"pair {i + 1} bare: " + ", ".join(f"{m} {bare_runs[-1][m]:.1f}" for m in MEASURES), flush=True)
            # the order alternates pair by pair (base first in odd pairs, head first in
            # even ones): a build that runs second in every pair would always meet the
            # machine the first left (its page cache, the load it raised)
            sides = (("base", a.worktree), ("head", ROOT))
            for side, checkout in sides if i % 2 == 0 else sides[::-1]:
                runs[side].append(build(checkout, a.study, side))
                print(f"pair {i + 1} {side}: " + ", ".join(f"{m} {runs[side][-1][m]:.1f}" for m in MEASURES), flush=True)
                if a.bare and not runs[side][-1]["returncode"]:
                    gaps[side].append(coefficient_gap(a.study / f"ab_{side}.duckdb", a.study / "bare.json"))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(a.worktree)], cwd=ROOT, check=False)
    result = {
        "command": " ".join(["benchmarks/ab_build.py", *sys.argv[1:]]),
        "base": base_sha,
        "head": head_sha,
        "study": str(a.study),
        "excluded": EXCLUDED,
        "left_out": AS_RUN,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "order": ["base,head" if i % 2 == 0 else "head,base" for i in range(a.pairs)],
        "runs": runs,
        "medians": {side: {m: statistics.median(r[m] for r in rs) for m in MEASURES} for side, rs in runs.items()},
        "ratio_head_over_base": {m: [h[m] / b[m] for b, h in zip(runs["base"], runs["head"], strict=False)] for m in MEASURES},
    }
    if a.bare:
        result["bare_runs"] = bare_runs
        result["bare_medians"] = {m: statistics.median(r[m] for r in bare_runs) for m in MEASURES}
        result["max_abs_coefficient_gap"] = gaps
        for side in ("base", "head"):
            ratios = {m: [r[m] / b[m] for b, r in zip(bare_runs, runs[side], strict=True)] for m in MEASURES}
            result[f"ratio_{side}_over_bare"] = {
                m: {"median": statistics.median(v), "range": [min(v), max(v)], "pairs": v} for m, v in ratios.items()
            }
            print(
                f"{side} / bare, wall: median {statistics.median(ratios['wall_s']):.2f}x, range "
                f"{min(ratios['wall_s']):.2f}-{max(ratios['wall_s']):.2f}x",
                flush=True,
            )
    print(json.dumps(result["medians"], indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
