"""Kill -9 a job mid-run, as a crash would: the shared step of the jobs' resume tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kill_once_written(argv: list[str], raw: Path, min_lines: int, env: dict[str, str], timeout_s: float) -> int:
    """Start ``argv`` in the project root, SIGKILL it as soon as ``raw`` holds
    ``min_lines`` lines (or it ended, or ``timeout_s`` passed); return its exit status
    (-SIGKILL when the kill hit a running job)."""
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + timeout_s
        while time.time() < deadline and proc.poll() is None:
            if raw.exists() and raw.read_text().count("\n") >= min_lines:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # it had already ended
        pass
    finally:
        proc.wait(timeout=30)
    return proc.returncode
