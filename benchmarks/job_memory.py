"""Peak memory of the forecast job and of `lookahead check` at scale (issue 35, item 6).

Run (from the project root):
    python benchmarks/job_memory.py job --rows 100000 --concurrency 32 \
        --code head=. --code base=/tmp/base-checkout --out benchmarks/results/job_memory_100k.json
    python benchmarks/job_memory.py check --rows 10000000 --code head=. --out ...
    python benchmarks/job_memory.py check --rows 10000000 --entities 2000 --dates 2500 --out ...

``--entities E --dates D``: the rows span E entities and D dates (row i is entity i mod E
on date (i div E) mod D), a realistic study's recall pairs, instead of 7 entities.

``job``: a synthetic study of ``--rows`` rows (tests/python/test_openai_backend.py's
write_openai_study) asks the loopback OpenAI-compatible server of the test suite, the
server running in this process and the job in a child (``python -m llm_jobs.run_all
--only forecast --study FILE --yes``, the job process `lookahead jobs --only forecast`
starts) so that only the job's own memory is measured. Each code root
named by ``--code`` (a checkout: the job runs with PYTHONPATH set to it) runs the same
study twice in a raw folder of its own: the first run asks every row, the second finds
every answer cached. ``check``: `lookahead check` (``python -m lookahead.cli check``, which
stages the rows and then runs the jobs' preflight, llm_jobs.preflight, in a child) on an
observations file of ``--rows`` rows, against the file's size on disk.

Peak memory is the child's ``ru_maxrss`` from ``wait4`` (the kernel's high-water mark of
the child or of its largest descendant, no sampling gap); the sum over the child and its
descendants is sampled too (`lookahead check` holds its rows while its preflight child
stages them again); the RSS is also sampled every 0.25 s beside the job's output lines, so
the result says at which step the peak was reached (the process's own samples, and those
of the process with its children: ``tree_peak_sampled_at_s``, ``last_line_before_tree_peak``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "python")]

import contextlib  # noqa: E402

from test_openai_backend import FakeOpenAIState, _handler  # noqa: E402

MIB = 1024 * 1024


def serve() -> tuple[str, FakeOpenAIState]:
    """The test suite's loopback server, answers computed per prompt (vary=True)."""
    state = FakeOpenAIState(vary=True)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1", state


def rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def tree_rss_kib(pid: int) -> int:
    """RSS of a process and every descendant (`lookahead check` runs the preflight in a
    child process: what the machine must hold is both)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss_kib(p) or 0
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return total


def own_peak_mib() -> float:
    """This process's own peak RSS (VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(round(int(ln.split()[1]) / 1024, 1) for ln in fh if ln.startswith("VmHWM:"))


def write_study_apart(tmp: Path, url: str, name: str, rows: int, shape: tuple[int, int] | None = None) -> Path:
    """write_openai_study in a child process: a study of ten million rows built here would
    leave this process's peak (gigabytes of row strings) in every child's ru_maxrss.
    ``shape``: (entities, dates) the rows span (write_openai_study), default its 7 entities."""
    code = (
        "import sys; from pathlib import Path; sys.path[:0] = sys.argv[1:3]; "
        "from test_openai_backend import write_openai_study; "
        "shape = tuple(map(int, sys.argv[7].split('x'))) if sys.argv[7] else None; "
        "print(write_openai_study(Path(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6]), shape=shape))"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(ROOT),
            str(ROOT / "tests" / "python"),
            str(tmp),
            url,
            name,
            str(rows),
            f"{shape[0]}x{shape[1]}" if shape else "",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Path(out.strip().splitlines()[-1])


def measure(cmd: list[str], code: Path, cwd: Path) -> dict[str, Any]:
    """Run ``cmd`` with PYTHONPATH=code; its exit, wall time, peak RSS (wait4) and an RSS
    timeline beside its output lines (which step reached the peak)."""
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(
        target=lambda: [lines.append((time.perf_counter() - t0, ln.rstrip())) for ln in proc.stdout], daemon=True
    )  # type: ignore[union-attr]
    reader.start()
    samples: list[tuple[float, int]] = []
    tree: list[tuple[float, int]] = []
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = round(time.perf_counter() - t0, 2)
        kib = rss_kib(proc.pid)
        if kib:
            samples.append((now, kib))
        tree.append((now, tree_rss_kib(proc.pid)))
        time.sleep(0.25)
    wall = time.perf_counter() - t0
    reader.join(5)
    tree_peak = max((k for _, k in tree), default=0)
    peak_at = max(samples, key=lambda s: s[1])[0] if samples else None
    before_peak = [ln for t, ln in lines if peak_at is None or t <= peak_at]
    tree_peak_at = max(tree, key=lambda s: s[1])[0] if tree else None
    before_tree_peak = [ln for t, ln in lines if tree_peak_at is None or t <= tree_peak_at]
    return {
        # Linux carries a process's high-water mark across fork and exec into its child's
        # ru_maxrss: a peak at this floor is this process's, not the child's
        "floor_mib": own_peak_mib(),
        "exit": os.waitstatus_to_exitcode(status),
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        # sampled every 0.25 s over the process and its children (a lower bound)
        "tree_peak_rss_mib_sampled": round(tree_peak / 1024, 1),
        "peak_sampled_at_s": peak_at,
        "last_line_before_peak": before_peak[-1] if before_peak else None,
        "output": [f"{t:7.1f}s {ln}" for t, ln in lines][-25:],
        # every 20th sample: the shape of the curve without the whole series
        "rss_mib_timeline": [(t, round(k / 1024)) for t, k in samples[:: max(1, len(samples) // 40)]],
        # the same over the process and its children (`lookahead check`'s preflight child):
        # when the sampled tree peak came, and the last output line before it
        "tree_peak_sampled_at_s": tree_peak_at,
        "last_line_before_tree_peak": before_tree_peak[-1] if before_tree_peak else None,
        "tree_rss_mib_timeline": [(t, round(k / 1024)) for t, k in tree[:: max(1, len(tree) // 40)]],
    }


#: The jobs ``job --task`` measures (names of llm_jobs.registry, run with --only).
JOB_TASKS = ("forecast", "recall")


def job_plan(ctx: Any, task: str) -> tuple[Any, dict[str, Any]]:
    """The job's queries and params, as the job plans them (forecast: one per row; recall:
    one per (entity_id, target_date), prompts with the study's labels)."""
    from llm_jobs import forecast, recall
    from lookahead.keys import task_params

    if task == "recall":
        params = task_params(ctx.study, recall.TASK)
        return recall.plan(ctx, params, None), params
    return forecast.plan(ctx)


def prefill(study: Path, share: float, task: str = "forecast") -> int:
    """Write the answers of ``share`` of the rows into the study's raw file before its first
    run, as the job writes them (its plan's keys and line skeleton, the loopback server's
    answer to the prompt: its top log-probs varied_top and their most likely token), so that a large study's first run asks
    only the rest. The job's peak does not depend on how many it asks (each answer is
    written and let go), so this keeps a million-row first run to minutes on two cores."""
    from test_openai_backend import varied_top

    from llm_jobs.cli import arg_parser
    from llm_jobs.context import make_context
    from llm_jobs.query_loop import record_skeleton
    from lookahead.cache.files import utc_now
    from lookahead.scoring import first_token_prob

    ctx = make_context(arg_parser("prefill").parse_args(["--study", str(study), "--yes"]))
    queries, params = job_plan(ctx, task)
    every = round(1 / (1 - share)) if share < 1 else 0
    raw = ctx.study.raw_file(task)
    raw.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(raw, "w", encoding="utf-8") as fh:
        for i, q in enumerate(queries):
            if every and i % every == 0:
                continue  # left for the first run to ask
            rec = record_skeleton(ctx, task, q, params)
            given = varied_top(q.prompt)
            top = [{"token_id": None, "token": t, "logprob": lp} for t, lp in sorted(given.items(), key=lambda kv: -kv[1])]
            now = utc_now()
            rec.update(
                {
                    "backend": "openai",
                    "response_text": max(given, key=given.get),
                    "top_logprobs": top,
                    "started_at": now,
                    "finished_at": now,
                }
            )
            if task == "forecast":
                rec["first_token_prob"] = first_token_prob(top)
            fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
            n += 1
    return n


def job_study_apart(
    tmp: Path,
    url: str,
    name: str,
    rows: int,
    concurrency: int,
    share: float,
    shape: tuple[int, int] | None = None,
    task: str = "forecast",
) -> tuple[Path, int]:
    """The job's study (write_openai_study, over ``shape`` as in :func:`write_study_apart`)
    and its prefilled answers (:func:`prefill`), written by a child process; (study file,
    answers prefilled)."""
    code = (
        "import json, sys; from pathlib import Path; sys.path[:0] = sys.argv[1:4]; "
        "from test_openai_backend import write_openai_study; from job_memory import prefill; "
        "a = json.loads(sys.argv[4]); "
        "study = write_openai_study(Path(a['tmp']), a['url'], a['name'], a['rows'], "
        "shape=tuple(a['shape']) if a['shape'] else None, "
        "concurrency=a['concurrency'], backend_options={'backoff_s': 0.01, 'timeout_s': 30}); "
        "n = prefill(study, a['share'], a['task']) if a['share'] else 0; print(json.dumps([str(study), n]))"
    )
    spec = json.dumps(
        {
            "tmp": str(tmp),
            "url": url,
            "name": name,
            "rows": rows,
            "concurrency": concurrency,
            "share": share,
            "shape": shape,
            "task": task,
        }
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT), str(ROOT / "tests" / "python"), str(ROOT / "benchmarks"), spec],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    study, n = json.loads(out.strip().splitlines()[-1])
    return Path(study), int(n)


def code_roots(specs: list[str]) -> dict[str, Path]:
    out = {}
    for spec in specs:
        label, _, path = spec.partition("=")
        out[label] = Path(path or label).resolve()
    return out


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg": os.getloadavg()}


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="job-memory-"))
    url, state = serve()
    result: dict[str, Any] = {
        "rows": args.rows,
        "concurrency": args.concurrency,
        "runs": {},
        "entities": args.entities,
        "dates": args.dates,
        "task": args.task,
    }
    for label, code in code_roots(args.code).items():
        # the study and its prefilled answers are written by a child process: built here they
        # would leave this process's peak in the job's ru_maxrss (see measure's floor_mib)
        study, prefilled = job_study_apart(
            tmp, url, f"mem_{label}", args.rows, args.concurrency, args.prefill, shape_of(args), args.task
        )
        runs: dict[str, Any] = {"prefilled": prefilled}
        for run in ("first", "cached"):
            before = state.requests
            m = measure(
                [sys.executable, "-m", "llm_jobs.run_all", "--only", args.task, "--study", str(study), "--yes"], code, code
            )
            m["requests"] = state.requests - before
            m["loadavg_after"] = os.getloadavg()
            runs[run] = m
            print(
                f"{label} {run}: exit {m['exit']}, {m['wall_s']} s, peak {m['peak_rss_mib']} MiB "
                f"({m['requests']} requests; peak near: {m['last_line_before_peak']!r})",
                flush=True,
            )
        raw = tmp / f"mem_{label}" / "raw" / f"{args.task}.jsonl"
        runs["raw_file_mib"] = round(raw.stat().st_size / MIB, 1) if raw.exists() else None
        result["runs"][label] = runs
        if not args.keep:
            for p in (tmp / f"mem_{label}").rglob("*"):
                if p.is_file():
                    p.unlink()
    return result


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="check-memory-"))
    url, _ = serve()
    study = write_study_apart(tmp, url, "check", args.rows, shape_of(args))
    data = tmp / "check.csv"
    size = data.stat().st_size
    result: dict[str, Any] = {
        "rows": args.rows,
        "file_mib": round(size / MIB, 1),
        "runs": {},
        "entities": args.entities,
        "dates": args.dates,
    }
    for label, code in code_roots(args.code).items():
        m = measure([sys.executable, "-m", "lookahead.cli", "check", "--study", str(study)], code, code)
        peak = max(m["peak_rss_mib"], m["tree_peak_rss_mib_sampled"])
        m["peak_over_file"] = round(peak * MIB / size, 2)
        result["runs"][label] = m
        print(
            f"{label}: exit {m['exit']}, {m['wall_s']} s, peak {m['peak_rss_mib']} MiB (process), "
            f"{m['tree_peak_rss_mib_sampled']} MiB (with its preflight child) = {m['peak_over_file']}x "
            f"the file ({result['file_mib']} MiB)",
            flush=True,
        )
    if not args.keep:
        data.unlink()
    return result


def shape_of(args: argparse.Namespace) -> tuple[int, int] | None:
    """(entities, dates) of --entities and --dates, or None for write_openai_study's own shape."""
    if args.entities is None and args.dates is None:
        return None
    if not (args.entities and args.dates):
        raise SystemExit("error: give --entities and --dates together")
    return int(args.entities), int(args.dates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("job", "check"))
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--code", action="append", default=[], help="LABEL=DIR, a checkout to run (repeatable; default: this one)")
    ap.add_argument("--task", choices=JOB_TASKS, default="forecast", help="job: the job measured (default forecast)")
    ap.add_argument(
        "--prefill", type=float, default=0.0, help="job: share of the answers written into the cache before the first run"
    )
    ap.add_argument("--keep", action="store_true", help="keep the study's files")
    ap.add_argument("--entities", type=int, default=None, help="entities the rows span (with --dates; default: 7 entities)")
    ap.add_argument("--dates", type=int, default=None, help="dates the rows span (with --entities)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    args.code = args.code or [f"head={ROOT}"]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    result = run_job(args) if args.what == "job" else run_check(args)
    result.update(
        {
            "command": "python " + " ".join(sys.argv),
            "machine": machine(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "total_s": round(time.perf_counter() - t0, 1),
        }
    )
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text if not args.out else f"wrote {args.out}")


if __name__ == "__main__":
    main()
