"""The LLM jobs against a loopback OpenAI-compatible server that injects faults.

Run (from the project root):
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_fault_storm.py --rows 300 --seeds 1 2 3

A fault-free server run gives the reference answers. Then, per seed, a server that puts
a seeded mix of faults (malformed JSON, HTML 200s, empty and missing log-probs, NaN,
missing text, 429 with and without Retry-After, 500, connection resets, slow replies) into
``--rate`` of its replies serves the same study; the jobs are rerun until they exit 0
(at most 4 invocations). Printed per seed: requests sent against queries (the overhead of
the retries), faults injected by kind, invocations and exit codes, incomplete answers in
the cache (must be 0), whether the answers equal the fault-free run's, and whether any
output held a traceback. The server is the test fixture of tests/python/test_openai_backend.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

from test_openai_backend import FakeOpenAIState, _handler, raw_answers, write_openai_study  # noqa: E402

from llm_jobs import run_all  # noqa: E402
from lookahead.tasks import incomplete_reason  # noqa: E402


def serve(**kwargs: object) -> tuple[str, FakeOpenAIState]:
    state = FakeOpenAIState(**kwargs)  # type: ignore[arg-type]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1", state


def quiet_run(study: Path, err: io.StringIO) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        return run_all.main(["--study", str(study), "--yes"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--rate", type=float, default=0.05)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fault-storm-"))
    url, _ = serve(vary=True)
    clean = write_openai_study(tmp, url, "clean", args.rows)
    assert quiet_run(clean, io.StringIO()) == 0
    expected = raw_answers(tmp / "clean" / "raw")
    for seed in args.seeds:
        url, state = serve(vary=True, fault_rate=args.rate, fault_seed=seed)
        study = write_openai_study(tmp, url, f"storm{seed}", args.rows)
        codes: list[int] = []
        err = io.StringIO()
        t0 = time.perf_counter()
        while not codes or (codes[-1] != 0 and len(codes) < 4):
            codes.append(quiet_run(study, err))
        raw = tmp / f"storm{seed}" / "raw"
        incomplete = sum(
            incomplete_reason(json.loads(line)) is not None
            for task in ("forecast", "recall", "mink")
            for line in (raw / f"{task}.jsonl").read_text().splitlines()
        )
        print(
            f"seed {seed}: {args.rows} rows, {len(expected)} queries, {state.requests} requests "
            f"(+{state.requests / len(expected) - 1:.1%}), {len(state.injected)} faults "
            f"{dict(Counter(state.injected))}, invocations {len(codes)} (exit {codes}), "
            f"incomplete answers cached {incomplete}, answers equal to fault-free: "
            f"{raw_answers(raw) == expected}, traceback: {'Traceback' in err.getvalue()}, "
            f"{time.perf_counter() - t0:.1f} s"
        )


if __name__ == "__main__":
    main()
