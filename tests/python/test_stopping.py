"""Stopping `lookahead run` stops the spending (lookahead/stopping.py): SIGTERM to the
wrapper reaches the job, which writes the answers in flight and exits; after a SIGKILL
of the wrapper the job notices within seconds and does the same; a second start while
the job writes names its process. Against the loopback OpenAI-compatible server of
test_openai_backend: after the stop, no request reaches the server, and every request
it received has its answer in the cache. (A job started by hand, without the wrapper's
variable, runs to its end: every in-process job test, e.g. test_hostile_settings's
prompt test, is one.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from test_openai_backend import server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture

from lookahead.children import dbt_env

ROOT = Path(__file__).resolve().parents[2]
N_ROWS = 600
DELAY_S = 0.25  # per request: 8 in flight, about 30 requests a second


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie nobody reaped has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _lines(path: Path) -> int:
    return path.read_text(encoding="utf-8").count("\n") if path.exists() else 0


def _wait_for(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _start_run(study: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "lookahead.cli", "run", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=dbt_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _running_job(raw: Path, proc: subprocess.Popen) -> int:
    """The job child's pid (from its cache lock) once it has written a few answers."""
    answers = raw / "forecast.jsonl"
    _wait_for(lambda: _lines(answers) >= 5 or proc.poll() is not None, 180, "the first answers")
    assert proc.poll() is None, proc.communicate()
    pid = int((raw / "forecast.jsonl.lock").read_text().split()[0])
    assert pid != proc.pid and _alive(pid)
    return pid


def _assert_stopped(state: Any, raw: Path, job: int) -> None:
    """The job has gone, nothing more is asked, and every answer received was written."""
    _wait_for(lambda: not _alive(job), 30, "the job to stop")
    asked = state.requests
    time.sleep(1.0)  # well above the 0.25 s between a request's start and the next
    assert state.requests == asked, "a request started after the job was stopped"
    assert state.in_flight == 0
    written = sum(_lines(p) for p in raw.glob("*.jsonl"))  # answers and failures, every task
    assert written == asked  # the answers of the requests in flight were written too
    assert asked < 3 * N_ROWS  # it did stop early (forecast, recall and Min-K% ask N_ROWS each at most)


def test_sigterm_reaches_the_job_which_writes_what_it_received(server_factory: Any, tmp_path: Path) -> None:
    url, state = server_factory(delay_s=DELAY_S)
    study = write_openai_study(tmp_path, url, "term", N_ROWS)
    raw = tmp_path / "term" / "raw"
    proc = _start_run(study)
    try:
        job = _running_job(raw, proc)
        # a second start while the job writes: one line naming the job's process
        second = subprocess.run(
            [sys.executable, "-m", "llm_jobs.run_all", "--study", str(study), "--yes"],
            cwd=ROOT,
            env=dbt_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode != 0
        assert f"(process {job})" in second.stderr, second.stderr[-2000:]
        assert "Traceback" not in second.stderr
        assert _alive(job) or _lines(raw / "forecast.jsonl") == N_ROWS
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in out + err
    assert "finished answers are saved" in err
    assert not _alive(job)  # the wrapper waited for its child
    _assert_stopped(state, raw, job)


def test_a_killed_wrapper_leaves_no_job_asking(server_factory: Any, tmp_path: Path) -> None:
    url, state = server_factory(delay_s=DELAY_S)
    study = write_openai_study(tmp_path, url, "kill", N_ROWS)
    raw = tmp_path / "kill" / "raw"
    proc = _start_run(study)
    try:
        job = _running_job(raw, proc)
        proc.kill()  # SIGKILL: the wrapper can pass nothing on
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    _assert_stopped(state, raw, job)
