"""A fresh `make demo`, stage by stage: what a new user waits for.

    python benchmarks/demo_stages.py --work /tmp/demo_fresh --out benchmarks/results/demo_fresh.json

Clones this checkout's HEAD into ``--work`` (no virtual environment, raw answers, database
or report: what CI's clean clone holds), runs `make demo` there, and times every line it
prints. The stages are cut at the lines the Makefile prints when each step starts:

- install: from the start to the first study's `lookahead run`;
- each demo study's `lookahead run` (jobs, dbt build, report);
- the claim-only demos (regression and ranking, leaky and prudent);
- the closing checks: verdicts, comparison, effective cutoff, claim headlines.

It also records the longest stretch without a line of output (the README promises
progress at least every 30 seconds), the machine's load before and after, and the exit
code. A wall-clock figure on a shared machine is only comparable at the same load: the
JSON keeps the load next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (stage name, the start of the line that opens it), in the order `make demo` prints them.
STAGES = (
    ("study demo_clean", "lookahead run --study demo/claims/demo_clean.yml"),
    ("study demo_contaminated", "lookahead run --study demo/claims/demo_contaminated.yml"),
    ("study demo_contaminated_early_cutoff", "lookahead run --study demo/studies/contaminated_early_cutoff.yml"),
    ("claim-only demos (4)", "== Claim-only demo:"),
    ("verdicts, comparison, cutoff and claim checks", "== Demo verdicts"),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="an empty folder to clone into (replaced)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "demo_fresh.json")
    ap.add_argument("--log", type=Path, default=None, help="also write the demo's output, timed, here")
    a = ap.parse_args(argv)
    shutil.rmtree(a.work, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(a.work)], check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=a.work, capture_output=True, text=True, check=True
    ).stdout.strip()
    load_before = os.getloadavg()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    start = time.monotonic()
    proc = subprocess.Popen(
        ["make", "demo"], cwd=a.work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    marks: dict[str, float] = {}
    last, gap, gap_after = start, 0.0, ""
    timed: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.monotonic()
        if now - last > gap:
            gap, gap_after = now - last, timed[-1] if timed else "(start)"
        last = now
        text = line.rstrip("\n")
        timed.append(f"{now - start:8.1f} {text}")
        for name, opener in STAGES:
            if name not in marks and opener in text:
                marks[name] = now - start
    rc = proc.wait()
    total = time.monotonic() - start
    cuts = [("install", 0.0), *sorted(marks.items(), key=lambda kv: kv[1])]
    stages = {name: round((cuts[i + 1][1] if i + 1 < len(cuts) else total) - at, 1) for i, (name, at) in enumerate(cuts)}
    result = {
        "command": "python benchmarks/demo_stages.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "commit": commit,
        "exit_code": rc,
        "total_s": round(total, 1),
        "stages_s": stages,
        "longest_silence_s": round(gap, 1),
        "longest_silence_after": gap_after.strip()[:200],
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if a.log:
        a.log.write_text("\n".join(timed) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return rc


if __name__ == "__main__":
    sys.exit(main())
