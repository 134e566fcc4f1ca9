"""Benchmark: the CPU-seconds of one `dbt build` of a generated study, node by node.

    python benchmarks/node_cpu.py STUDY_DIR [--threads 1] [--out FILE] [extra dbt args]

Builds the side-by-side set of benchmarks/bench_dbt_build.py (its EXCLUDED) of the study
in STUDY_DIR (vars.json and raw/, as bench_dbt_build.py generates it) with the code of
this checkout, samples the CPU time of the build's process tree every 50 ms, and charges
each interval to the nodes running in it (from target/run_results.json: each node's
compile and execute span), split evenly when several run; the data tests are summed by
kind and the rest is "(outside nodes)": dbt's start, parse, manifest and exit. CPU
seconds rather than node wall time: on a shared machine a node's wall time is mostly
waiting, and with two threads one node's wall time holds the other's work. With
--threads 1 (the default) no two nodes share an interval; the gate worker's import of
Great Expectations (lookahead.gates.worker, a child process of the build) is then charged
to the nodes it overlaps, the first models of the build."""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale
from bench_dbt_build import EXCLUDED, ROOT, _env

OUTSIDE = "(outside nodes)"


def node_kind(unique_id: str) -> str:
    """A model, seed or hook by name; a data test by its generic test (the custom ones as
    one); the unit tests as one."""
    kind = unique_id.split(".")[0]
    if kind == "test":
        name = unique_id.split(".")[2]
        for generic in ("column_rules", "not_null", "unique", "relationships"):
            if name.startswith(generic):
                return f"(test: {generic})"
        return "(test: other)"
    if kind == "unit_test":
        return "(unit tests)"
    return unique_id.split(".")[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study_dir", type=Path)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--out", type=Path)
    args, extra = ap.parse_known_args()
    vars_ = json.loads((args.study_dir / "vars.json").read_text())
    db = args.study_dir / "node_cpu.duckdb"
    target = args.study_dir / "target_node_cpu"
    dbt = Path(sys.executable).with_name("dbt")
    cmd = [str(dbt), "build", "--vars", json.dumps(vars_), "--target-path", str(target), "--project-dir", str(ROOT)]
    cmd += ["--threads", args.threads, "--exclude", *EXCLUDED, *extra]
    load0 = os.getloadavg()
    bench_scale.RssSampler.__init__.__defaults__ = (0.05,)  # every 50 ms
    res = bench_scale.run_child(cmd, _env(db))
    sampler, tail = res.pop("_sampler"), res.pop("_tail")
    if res["returncode"]:
        print(tail)
    spans = []
    for r in json.loads((target / "run_results.json").read_text())["results"]:
        timing = [t for t in r.get("timing", []) if t.get("started_at")]
        if timing:
            start, end = bench_scale._ts(timing[0]["started_at"]), bench_scale._ts(timing[-1]["completed_at"])
            spans.append((start, end, node_kind(r["unique_id"])))
    cpu: collections.Counter[str] = collections.Counter()
    for (t0, c0), (t1, c1) in itertools.pairwise(sampler.cpu):
        mid = (t0 + t1) / 2
        running = [name for a, b, name in spans if a <= mid <= b] or [OUTSIDE]
        for name in running:
            cpu[name] += (c1 - c0) / len(running)
    total = sampler.cpu[-1][1] if sampler.cpu else float("nan")
    counts = collections.Counter(name for _, _, name in spans)
    out = {
        "command": " ".join(["benchmarks/node_cpu.py", *sys.argv[1:]]),
        "load_before": load0,
        "load_after": os.getloadavg(),
        "wall_s": res["wall_s"],
        "cpu_s_sampled": total,
        "returncode": res["returncode"],
        "cpu_s_by_node": {name: round(c, 3) for name, c in cpu.most_common()},
        "nodes_by_kind": dict(counts),
    }
    print(f"wall {res['wall_s']:.1f} s, CPU {total:.1f} s, load {load0[0]:.1f}")
    for name, c in cpu.most_common(30):
        print(f"  {name:55s} {c:6.2f}" + (f"  ({counts[name]} nodes)" if counts[name] > 1 else ""))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
