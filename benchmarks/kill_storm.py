"""Kill storm (issue 22, "no paid answer lost"): SIGKILL the forecast job again and again
while it asks a loopback OpenAI-compatible server, then finish it; count the requests the
server received beyond the one per query the study needs.

Run: ``python benchmarks/kill_storm.py [--kills 24] [--rows 120]`` (writes
benchmarks/results/kill_storm.json). With one stream (backend concurrency 1) each kill
can cost at most the request in flight; with n streams, at most n."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "python"), str(ROOT)]

from kill_job import kill_once_written  # noqa: E402
from test_openai_backend import FakeOpenAIState, _handler, write_openai_study  # noqa: E402


def storm(kills: int, rows: int, concurrency: int) -> dict:
    state = FakeOpenAIState()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            study = write_openai_study(
                tmp_path,
                url,
                "storm",
                rows,
                tokenizer_path=None,
                model_path=None,
                min_panel_rows=1,
                batch_size=16,
                backend_options={"backoff_s": 0.01, "timeout_s": 5, "concurrency": concurrency},
            )
            raw = tmp_path / "storm/raw/forecast.jsonl"
            env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
            argv = [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes"]
            killed = 0
            step = max(1, rows // (kills + 1))
            for i in range(kills):
                if kill_once_written(argv, raw, step * (i + 1), env, 120) < 0:
                    killed += 1
            final = kill_once_written([*argv], raw, 10**9, env, 300)  # runs to its end
            keys = [json.loads(line)["key"] for line in raw.read_text().splitlines()]
    finally:
        httpd.shutdown()
        httpd.server_close()
    extra = state.requests - rows
    return {
        "rows": rows,
        "concurrency": concurrency,
        "kills_attempted": kills,
        "kills_hit_a_running_job": killed,
        "final_exit": final,
        "answers_written": len(keys),
        "distinct_keys": len(set(keys)),
        "requests": state.requests,
        "requests_beyond_minimum": extra,
        "beyond_minimum_per_kill": round(extra / killed, 3) if killed else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=24)
    p.add_argument("--rows", type=int, default=120)
    args = p.parse_args()
    results = [storm(args.kills, args.rows, c) for c in (1, 8)]
    out = ROOT / "benchmarks" / "results" / "kill_storm.json"
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for r in results:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
