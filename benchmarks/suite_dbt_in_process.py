"""The test suite's dbt calls in the test worker (dbtRunner, tests/python/dbt_runner.py)
against a `dbt` process per call ($LOOKAHEAD_TEST_DBT_SUBPROCESS=1), side by side.

Each pair runs the same test selection once each way, in alternating order (the first of a
pair pays what the machine's caches do not hold yet), and records the wall time and the
CPU time of pytest and every process it started (user + system, from the kernel's
accounting of waited-for children). CPU seconds are the figure to read on a shared
machine: the wall time moves with whatever else runs there.

    .venv/bin/python benchmarks/suite_dbt_in_process.py --pairs 1 \\
        --out benchmarks/results/suite_dbt_in_process.json tests/python/test_dbt_build.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPROCESS_ENV = "LOOKAHEAD_TEST_DBT_SUBPROCESS"
#: What the Makefile exports for `make test`, where the caller's environment does not set it.
MAKE_TEST_ENV = {
    "DBT_PROFILES_DIR": str(ROOT / "profiles"),
    "DBT_SEND_ANONYMOUS_USAGE_STATS": "False",
    "MPLCONFIGDIR": str(ROOT / ".mplconfig"),
    "HF_HUB_OFFLINE": "1",
    "GX_ANALYTICS_ENABLED": "False",
    "PYTHONPATH": str(ROOT),
}


def run_once(selection: list[str], subprocess_dbt: bool, basetemp: Path) -> dict[str, float | int | str]:
    """One pytest run of `selection` (no xdist), dbt in process or as a process per call."""
    env = {**MAKE_TEST_ENV, **os.environ}
    env.pop(SUBPROCESS_ENV, None)
    if subprocess_dbt:
        env[SUBPROCESS_ENV] = "1"
    basetemp.parent.mkdir(parents=True, exist_ok=True)  # pytest makes the folder, not its parents
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", f"--basetemp={basetemp}", *selection]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    return {
        "dbt": "subprocess" if subprocess_dbt else "in_process",
        "returncode": proc.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "summary": summary,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("selection", nargs="+", help="test files or node ids")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/suite_dbt_in_process"))
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    runs = []
    for i in range(args.pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        for subprocess_dbt in order:
            run = run_once(args.selection, subprocess_dbt, args.work / f"{i}-{int(subprocess_dbt)}")
            print(json.dumps(run), flush=True)
            runs.append(run)
    if any(r["returncode"] != 0 for r in runs):
        print("a run failed: nothing written", file=sys.stderr)
        return 1
    by = {kind: [r for r in runs if r["dbt"] == kind] for kind in ("in_process", "subprocess")}
    ratio = sum(float(r["cpu_s"]) for r in by["in_process"]) / sum(float(r["cpu_s"]) for r in by["subprocess"])
    result = {
        "commit": commit,
        "selection": args.selection,
        "load_average_at_start": os.getloadavg(),
        "runs": runs,
        "cpu_ratio_in_process_over_subprocess": round(ratio, 3),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"CPU in process / subprocess: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
