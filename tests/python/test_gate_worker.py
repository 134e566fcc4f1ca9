"""lookahead.gates.worker: the gates' Great Expectations in a process of its own.

What a user must not notice: a gate validated by the worker returns the same table, and
fails with the same message, as the same gate validated in the build process (the
reference here: lookahead.gates.expectations.expectation_rows called in this process, real GX both ways); a
worker that dies leaves the gates to the build process with nothing lost; the worker
ends after the last gate it was started for. Each case runs in a fresh interpreter, so
that "Great Expectations was never imported here" shows that the worker, not a fallback,
did the validating."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import pandas as pd
    from lookahead import gates
    from lookahead.gates import expectations
    from lookahead.gates import worker as gate_worker

    def frame(lap):
        n = len(lap)
        return pd.DataFrame({"row_id": [f"r{i}" for i in range(n)], "n_invalid_logprobs": [0] * n,
                             "lap_mink": lap, "mink_key": [f"k{i}" for i in range(n)]})

    def outcome(gate, df):
        try:
            return {"table": gates.run_gate(gate, df, "mink_scores", id_column="mink_key").to_dict("records")}
        except gates.GateFailed as exc:
            return {"failed": str(exc)}

    def reference(gate, df):
        suite = gates.load_suite("mink_scores")
        rows = expectations.expectation_rows(gate, gates.gate_frame(df, suite, "mink_key"), suite, {}, "mink_key")
        try:
            return {"table": gates.gate_table(gate, "mink_scores", rows).to_dict("records")}
        except gates.GateFailed as exc:
            return {"failed": str(exc)}
    """
)


def _run(body: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GX_ANALYTICS_ENABLED="False")
    out = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(body)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_worker_returns_what_the_build_process_would_and_ends_after_the_last_gate():
    got = _run(
        """
        gate_worker.start(["gate_a", "gate_b"])
        worker = gate_worker.worker()
        passing = outcome("gate_a", frame([0.1, 0.2, 0.3]))
        alive_between = worker.process.poll() is None
        failing = outcome("gate_b", frame([0.1, 1.5, 0.3]))
        served_here = "great_expectations" in sys.modules
        deadline = time.monotonic() + 30  # ended and reaped without anyone here waiting for it
        while os.path.exists(f"/proc/{worker.process.pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        reaped = not os.path.exists(f"/proc/{worker.process.pid}")
        ended = worker.process.wait(timeout=30)
        print(json.dumps({"passing": passing, "failing": failing, "served_here": served_here,
                          "alive_between": alive_between, "ended": ended, "reaped": reaped,
                          "closed": gate_worker.worker() is None,
                          "ref_passing": reference("gate_a", frame([0.1, 0.2, 0.3])),
                          "ref_failing": reference("gate_b", frame([0.1, 1.5, 0.3]))}))
        """
    )
    assert got["served_here"] is False  # validated in the worker: this process never imported GX
    assert got["passing"] == got["ref_passing"] and len(got["passing"]["table"]) == 3
    assert all(row["success"] for row in got["passing"]["table"])
    assert got["failing"] == got["ref_failing"]
    assert "failed 1 of 3 checks" in got["failing"]["failed"] and "mink_key=k1" in got["failing"]["failed"]
    # the worker served both gates, then ended on its own (its request pipe closed) and was reaped
    assert got["alive_between"] is True and got["ended"] == 0 and got["closed"] is True
    assert got["reaped"] is True


def test_a_worker_that_dies_leaves_the_gate_to_the_build_process():
    got = _run(
        """
        gate_worker.start(["gate_a"])
        worker = gate_worker.worker()
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=30)
        failing = outcome("gate_a", frame([0.1, 1.5, 0.3]))
        print(json.dumps({"failing": failing, "served_here": "great_expectations" in sys.modules,
                          "closed": gate_worker.worker() is None, "ref": reference("gate_a", frame([0.1, 1.5, 0.3]))}))
        """
    )
    assert got["served_here"] is True  # the fallback validated here
    assert got["failing"] == got["ref"] and "failed 1 of 3 checks" in got["failing"]["failed"]
    assert got["closed"] is True  # no further request is sent to a dead worker


def test_a_request_the_worker_cannot_validate_is_validated_here_and_fails_as_it_would():
    """An error inside the worker (here: an expectation parameter the suite needs is
    missing) sends the gate back to this process, which raises GX's own error, as a gate
    validated here always did."""
    got = _run(
        """
        import pytest
        gate_worker.start(["gate_panel"])
        suite = {"name": "needs_param", "expectations": [{"type": "expect_table_row_count_to_be_between",
                 "kwargs": {"min_value": {"$PARAMETER": "n_min"}}}]}
        gates.load_suite = lambda name: suite
        df = pd.DataFrame({"row_id": ["a"]})
        worker = gate_worker.worker()
        asked = worker.expectation_rows("gate_panel", lambda: df, suite, {}, "row_id")
        try:
            gates.run_gate("gate_panel", df, "needs_param", id_column="row_id")
            here = "no error"
        except Exception as exc:
            here = type(exc).__name__
        print(json.dumps({"asked": asked, "here": here, "imported_here": "great_expectations" in sys.modules}))
        """
    )
    assert got["asked"] is None  # the worker replied with an error, not rows
    assert got["imported_here"] is True and got["here"] != "no error"


def test_outside_a_build_no_worker_is_started():
    got = _run(
        """
        table = outcome("gate_a", frame([0.1, 0.2]))
        print(json.dumps({"worker": gate_worker.worker() is not None, "ok": "table" in table,
                          "imported_here": "great_expectations" in sys.modules}))
        """
    )
    assert got == {"worker": False, "ok": True, "imported_here": True}


def test_the_worker_process_ends_when_the_build_process_goes():
    """A build killed before its gates: the worker reads end-of-file and exits (it is not
    left importing or waiting)."""
    script = _PRELUDE + textwrap.dedent(
        """
        gate_worker.start(["gate_a"])
        print(gate_worker.worker().process.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), GX_ANALYTICS_ENABLED="False")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    pid = int(out.stdout.split()[0])
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split(")")[1].split()[0] == "Z":
            break  # exited, waiting to be reaped by init
        time.sleep(0.2)
    else:
        raise AssertionError(f"gate worker {pid} still running a minute after its build process was killed")
