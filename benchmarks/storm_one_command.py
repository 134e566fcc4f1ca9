"""A fault storm ends in one command (issue 46): the LLM jobs against a loopback
OpenAI-compatible server that puts transport faults into one share of its replies and
content faults into another, run until they exit 0.

Run (from the project root):
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/storm_one_command.py \
        --storms 20 --rows 300 --transport 0.2 --content 0.2 [--passes 0] [--out FILE]

Transport faults: 429 with and without Retry-After, 500, a connection reset, a reply
slower than timeout_s. Content faults: malformed JSON, an HTML 200, empty and missing
log-probs, NaN, a positive log-prob, missing text. Each storm has its own seed and a new
server; a fault-free run gives the reference answers. Counted per storm: invocations
until exit 0 (at most 5), bad answers cached (a line that is no complete answer, or an
answer that differs from the fault-free run's), tracebacks. ``--passes`` sets the study's
failed_query_passes (default: the setting's default); 0 gives the behaviour before the
end-of-job pass. The server is the test fixture of tests/python/test_openai_backend.py.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests" / "python"), str(ROOT)]

from bench_fault_storm import quiet_run, serve  # noqa: E402
from test_openai_backend import raw_answers, write_openai_study  # noqa: E402

from lookahead.tasks import incomplete_reason  # noqa: E402

TRANSPORT = ("429_retry_after", "429_plain", "500", "reset", "slow")
CONTENT = ("malformed_json", "html_200", "empty_logprobs", "missing_logprobs", "nan", "positive_logprob", "missing_text")
MAX_INVOCATIONS = 5


def fault_kinds(transport: float, content: float) -> tuple[str, ...]:
    """Kinds drawn in turn so that transport and content faults come in the ratio asked
    (each kind of a group equally often): 35 slots, 5 x 7 of each group's kinds."""
    t = [TRANSPORT[i % len(TRANSPORT)] for i in range(35)]
    c = [CONTENT[i % len(CONTENT)] for i in range(35)]
    if transport == content:
        return tuple(k for pair in zip(t, c, strict=False) for k in pair)
    n_t = round(70 * transport / (transport + content))
    return tuple(t[: max(n_t, 0)] + c[: 70 - n_t])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storms", type=int, default=20)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--transport", type=float, default=0.2)
    ap.add_argument("--content", type=float, default=0.2)
    ap.add_argument("--passes", type=int, default=None, help="failed_query_passes (default: the setting's)")
    ap.add_argument("--out", default=None, help="JSON result file")
    args = ap.parse_args()
    extra = {} if args.passes is None else {"failed_query_passes": args.passes}
    tmp = Path(tempfile.mkdtemp(prefix="storm-one-command-"))
    url, _ = serve(vary=True)
    clean = write_openai_study(tmp, url, "clean", args.rows, marks={})
    assert quiet_run(clean, io.StringIO()) == 0
    expected = raw_answers(tmp / "clean" / "raw")
    kinds = fault_kinds(args.transport, args.content)
    storms = []
    for seed in range(1, args.storms + 1):
        url, state = serve(vary=True, fault_rate=args.transport + args.content, fault_seed=seed, fault_kinds=kinds)
        study = write_openai_study(tmp, url, f"storm{seed}", args.rows, marks={}, **extra)
        codes: list[int] = []
        err = io.StringIO()
        t0 = time.perf_counter()
        while not codes or (codes[-1] != 0 and len(codes) < MAX_INVOCATIONS):
            codes.append(quiet_run(study, err))
        raw = tmp / f"storm{seed}" / "raw"
        lines = [
            json.loads(line)
            for task in ("forecast", "recall", "mink")
            for line in (raw / f"{task}.jsonl").read_text().splitlines()
        ]
        got = raw_answers(raw)
        bad = sum(incomplete_reason(r) is not None for r in lines)
        bad += sum(1 for k, a in got.items() if k in expected and a != expected[k])
        injected = Counter(state.injected)
        storm = {
            "seed": seed,
            "queries": len(expected),
            "requests": state.requests,
            "transport_faults": sum(injected[k] for k in TRANSPORT),
            "content_faults": sum(injected[k] for k in CONTENT),
            "invocations": len(codes),
            "exit_codes": codes,
            "bad_answers_cached": bad,
            "answers_equal_fault_free": got == expected,
            "traceback": "Traceback" in err.getvalue(),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        storms.append(storm)
        print(json.dumps(storm), flush=True)
    one = sum(s["invocations"] == 1 and s["exit_codes"] == [0] for s in storms)
    summary = {
        "command": " ".join(["benchmarks/storm_one_command.py", *sys.argv[1:]]),
        "rows": args.rows,
        "transport_rate": args.transport,
        "content_rate": args.content,
        "failed_query_passes": args.passes if args.passes is not None else "default (2)",
        "storms": len(storms),
        "one_invocation": one,
        "bad_answers_cached": sum(s["bad_answers_cached"] for s in storms),
        "all_answers_equal_fault_free": all(s["answers_equal_fault_free"] for s in storms),
        "tracebacks": sum(s["traceback"] for s in storms),
        "requests_per_query": round(sum(s["requests"] for s in storms) / sum(s["queries"] for s in storms), 3),
        "per_storm": storms,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "per_storm"}))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
