"""`make bench`: every benchmark, each against its baseline, results as JSON in
benchmarks/results/ (tracked, so a figure quoted in BENCHMARKS.md can be re-read).

Quick by default (minutes on 2 cores): dbt build vs the bare script at 91,361 rows (and
what dbt costs before any test), the Min-K% paths vs the per-text loop and the measured
compute ceiling, the fast bootstrap vs the naive refit, the cached demo re-run. --full
adds 1,000,000 rows (and more pairs, texts and naive draws) and the scale benchmark
(bench_scale.py: 100,000 to 10,000,000 rows, growth exponents of time and memory).

Where torch sees a CUDA GPU it also runs bench_gpu.py (Min-K% and recall on the GPU with
the transformers backend, against the per-text loop on the same GPU).

    python benchmarks/run_all.py [--full] [--only dbt,mink,bootstrap,cached,gpu,scale]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from llm_workload import SMOLLM2_GGUF, smollm2_dir  # this folder

ROOT = Path(__file__).resolve().parents[1]
B = ROOT / "benchmarks"


def _cuda_available(py: str) -> bool:
    """Whether torch in this interpreter sees a CUDA GPU (asked in a child: torch is slow to import)."""
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.call([py, "-c", probe], stderr=subprocess.DEVNULL) == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="large sizes too (1,000,000 rows; slower)")
    ap.add_argument("--only", default="dbt,mink,bootstrap,cached,gpu,scale", help="comma-separated subset")
    a = ap.parse_args()
    only = set(a.only.split(","))
    py = sys.executable
    steps: list[tuple[str, list[str]]] = []
    if "dbt" in only:
        # --floors: each pair also builds without any test, and dbt's start alone
        steps.append(
            (
                "dbt",
                [py, str(B / "bench_dbt_build.py"), "--pairs", "5" if a.full else "3", "--floors"]
                + (["--full"] if a.full else []),
            )
        )
    if "mink" in only:
        steps.append(
            ("mink", [py, str(B / "bench_mink.py"), "--texts", "128" if a.full else "48", "--repeats", "5" if a.full else "3"])
        )
    if "bootstrap" in only:
        steps.append(("bootstrap", [py, str(B / "bench_bootstrap.py"), "--naive-draws", "400" if a.full else "100"]))
    if "cached" in only:
        steps.append(("cached", [py, str(B / "bench_cached_rerun.py"), "--runs", "5" if a.full else "3"]))
    if "gpu" in only and _cuda_available(py):
        # the transformers backend on the GPU (device: cuda) against the per-text loop
        steps.append(
            (
                "gpu",
                [
                    py,
                    str(B / "bench_gpu.py"),
                    "--model",
                    str(smollm2_dir()),
                    "--gguf-file",
                    SMOLLM2_GGUF,
                    "--texts",
                    "4096" if a.full else "1024",
                ],
            )
        )
    if "scale" in only and a.full:
        # the protocol path at 100,000 / 1,000,000 (dbt) and up to 10,000,000 rows
        # (statistics models), with growth exponents: long, so only with --full
        steps.append(("scale", [py, str(B / "bench_scale.py")]))
    failed = []
    for name, cmd in steps:
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        if subprocess.call(cmd, cwd=ROOT):
            failed.append(name)
    if failed:
        raise SystemExit(f"benchmarks failed: {', '.join(failed)}")
    print(f"results in {B / 'results'}")


if __name__ == "__main__":
    main()
