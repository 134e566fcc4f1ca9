"""Benchmark: `lookahead report` (or `lookahead build`) of one study by two checkouts, run alternately.

What a change did to the command a user runs after every build (and that `lookahead run`
ends with), or to the build itself (`--command build`: `lookahead build` always builds):
each checkout first builds the study into a database of its own with `lookahead run`
(its answers cached in the study's raw_dir, so no model is asked), then the two run the
command in turn, base first in odd rounds and head first in even ones, each a fresh
process timed from outside (wall; user + system CPU of the process and the children it
waited for, from resource.getrusage). The study file is written per side with its own
results folder.

    python benchmarks/ab_report.py --base CHECKOUT --head CHECKOUT --study FILE [--command build] [--rounds 4] --out FILE
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def _cpu_child(cmd: list[str], env: dict[str, str], cwd: Path) -> dict:
    """One run: wall and the CPU seconds of the child (resource usage of waited children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "returncode": proc.returncode,
        "tail": (proc.stdout + proc.stderr)[-300:],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--head", type=Path, required=True)
    ap.add_argument("--study", type=Path, required=True, help="a study file whose raw_dir holds every answer")
    ap.add_argument("--command", choices=("report", "build"), default="report", help="the command timed")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ab_report_"))
    base_study = yaml.safe_load(args.study.read_text())
    sides = {"base": args.base.resolve(), "head": args.head.resolve()}
    envs, files = {}, {}
    for side, checkout in sides.items():
        study = {**base_study, "results_dir": str(work / side / "results"), "outputs_dir": str(work / side / "outputs")}
        files[side] = work / f"{side}.yml"
        files[side].write_text(yaml.safe_dump(study))
        envs[side] = dict(
            os.environ,
            PYTHONPATH=str(checkout),
            DBT_PROFILES_DIR=str(checkout / "profiles"),
            LOOKAHEAD_DUCKDB=str(work / f"{side}.duckdb"),
            DBT_SEND_ANONYMOUS_USAGE_STATS="False",
            GX_ANALYTICS_ENABLED="False",
            HF_HUB_OFFLINE="1",
        )
        built = _cpu_child([str(checkout / ".venv/bin/lookahead"), "run", "--study", str(files[side]), "--yes"], envs[side], work)
        if built["returncode"]:
            sys.exit(f"{side}: lookahead run failed: {built['tail']}")
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    order = []
    for i in range(args.rounds):
        pair = ("base", "head") if i % 2 == 0 else ("head", "base")
        order.append(",".join(pair))
        for side in pair:
            r = _cpu_child(
                [str(sides[side] / ".venv/bin/lookahead"), args.command, "--study", str(files[side])], envs[side], work
            )
            if r["returncode"]:
                sys.exit(f"{side}: lookahead {args.command} failed: {r['tail']}")
            runs[side].append({k: r[k] for k in ("wall_s", "cpu_s")})
            print(f"round {i + 1} {side}: wall {r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s", flush=True)
    medians = {side: {m: statistics.median(r[m] for r in rs) for m in ("wall_s", "cpu_s")} for side, rs in runs.items()}
    ratios = {m: [h[m] / b[m] for h, b in zip(runs["head"], runs["base"], strict=True)] for m in ("wall_s", "cpu_s")}
    result = {
        "command": " ".join(["benchmarks/ab_report.py", *sys.argv[1:]]),
        "base": subprocess.run(["git", "rev-parse", "HEAD"], cwd=sides["base"], capture_output=True, text=True).stdout.strip(),
        "head": subprocess.run(["git", "rev-parse", "HEAD"], cwd=sides["head"], capture_output=True, text=True).stdout.strip(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "order": order,
        "runs": runs,
        "medians": medians,
        "ratio_head_over_base": {m: {"median": statistics.median(r), "pairs": r} for m, r in ratios.items()},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"medians": medians, "ratio_head_over_base": result["ratio_head_over_base"]}, indent=1))


if __name__ == "__main__":
    main()
