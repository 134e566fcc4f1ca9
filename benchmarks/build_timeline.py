"""Benchmark: where the memory and the CPU time of one `dbt build` go, node by node.

    python benchmarks/build_timeline.py CHECKOUT STUDY_DIR [--out FILE] [extra dbt args]

Runs the protocol path's `dbt build` (bootstrap off, as bench_scale.py runs it) of the
code in CHECKOUT on a generated study (STUDY_DIR holds vars.json and raw/, as
bench_scale.py --keep leaves them), and prints about every second the RSS of the build's
process tree with the models running, then the slowest nodes, the wall time and the peak.
Two checkouts run one after the other on the same study give a side-by-side pair.
--out writes the run as JSON (wall, peak, per-node seconds and RSS while each ran, and
the CPU time of the process tree attributed to the nodes running, see cpu_by_node)."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

OUTSIDE = "(no node: dbt's start, parse and exit)"


def cpu_by_node(cpu: list[tuple[float, float]], spans: list[tuple[float, float, str]]) -> dict[str, float]:
    """The CPU seconds of each sampling interval, split evenly over the nodes running at
    its midpoint (OUTSIDE when none), summed per node, largest first. Even splitting is an
    approximation when nodes overlap: a node waiting on the interpreter lock is charged
    like one computing."""
    out: dict[str, float] = {}
    for (t0, c0), (t1, c1) in itertools.pairwise(cpu):
        mid = (t0 + t1) / 2
        running = [name for a, b, name in spans if a <= mid <= b] or [OUTSIDE]
        for name in running:
            out[name] = out.get(name, 0.0) + (c1 - c0) / len(running)
    return {n: round(c, 2) for n, c in sorted(out.items(), key=lambda kv: -kv[1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="the repository whose code builds")
    ap.add_argument("study_dir", type=Path, help="a generated study: vars.json and raw/")
    ap.add_argument("--out", type=Path, help="write the run as JSON here")
    args, extra = ap.parse_known_args()
    sys.path.insert(0, str(args.checkout / "benchmarks"))
    import bench_scale

    vars_ = json.loads((args.study_dir / "vars.json").read_text())
    db = args.study_dir / "scale.duckdb"
    db.unlink(missing_ok=True)
    target = args.study_dir / "target"
    dbt = Path(sys.executable).with_name("dbt")
    cmd = [str(dbt), "build", "--vars", json.dumps({**vars_, "bootstrap_draws": 0}), "--target-path", str(target), *extra]
    res = bench_scale.run_child(cmd, bench_scale._env(db))
    sampler, tail = res.pop("_sampler"), res.pop("_tail")
    if res["returncode"]:
        print(tail)
    spans, all_spans = [], []
    for r in json.loads((target / "run_results.json").read_text())["results"]:
        timing = [t for t in r.get("timing", []) if t.get("started_at")]
        ex = [t for t in timing if t.get("name") == "execute"]
        if ex and not r["unique_id"].startswith(("test.", "unit_test.")):
            spans.append(
                (
                    bench_scale._ts(ex[0]["started_at"]),
                    bench_scale._ts(ex[0]["completed_at"]),
                    r["unique_id"].split(".")[-1],
                    r["execution_time"],
                )
            )
        if timing:  # compile and execute, every node including the tests (for the CPU)
            kind = r["unique_id"].split(".")[0]
            all_spans.append(
                (
                    bench_scale._ts(timing[0]["started_at"]),
                    bench_scale._ts(timing[-1]["completed_at"]),
                    {"test": "(data tests)", "unit_test": "(unit tests)"}.get(kind, r["unique_id"].split(".")[-1]),
                )
            )
    t0 = sampler.samples[0][0]
    for t, mib in sampler.samples[::5]:
        print(f"{t - t0:6.1f} {mib:7.0f} {' '.join(n for a, b, n, _ in spans if a <= t <= b)}")
    nodes = [
        {"node": n, "s": round(e, 3), "rss_mib_while_running": sampler.max_between(a, b)}
        for a, b, n, e in sorted(spans, key=lambda s: -s[3])
    ]
    print("slowest:", ", ".join(f"{n['node']} {n['s']:.1f}" for n in nodes[:15]))
    cpu = cpu_by_node(sampler.cpu, all_spans)
    print("CPU seconds:", ", ".join(f"{n} {c:.1f}" for n, c in list(cpu.items())[:15]), f"(total {sum(cpu.values()):.1f})")
    res.update(
        checkout=str(args.checkout),
        study_dir=str(args.study_dir),
        nodes=nodes,
        cpu_by_node=cpu,
        max_sampled_mib=round(max(m for _, m in sampler.samples)),
        command=" ".join(["benchmarks/build_timeline.py", *sys.argv[1:]]),
    )
    print("wall", res["wall_s"], "peak", res["peak_rss_mib"], "max sampled", res["max_sampled_mib"])
    if args.out:
        args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
