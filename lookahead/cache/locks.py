"""Who writes a cache file, and what it is asking.

Each cache file has one writer at a time, which holds ``<file>.lock`` (an exclusive
``flock``, with the writer's pid and label written into it); a reader probes it without
writing it. A writer of a raw_dir other studies share says which keys it is about to ask
in ``<file>.plan``, so a later job waits for those answers instead of asking them too
(lookahead.cache.store RawStore.claim and earlier_plans)."""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def lock_writer(path: Path) -> list[str]:
    """What the holder of a cache file's lock wrote into it: [pid, writer label] ([] when
    unreadable or empty)."""
    try:
        return path.with_name(path.name + ".lock").read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return []


def try_lock(path: Path, label: str = "") -> Any:
    """The exclusive lock ``<file>.lock`` of a cache file, or None when another process
    holds it. The holder's pid and ``label`` (its study's shard name) are written into it
    (error messages, and whether a busy file is another study's: RawStore own_shard)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path.with_name(path.name + ".lock"), "a+")
    for pause in (*LOCK_RETRY_S, None):
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if pause is None:
                fh.close()
                return None
            time.sleep(pause)  # a reader's liveness probe (lock_is_held) holds it for microseconds
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()} {label}".rstrip() + "\n")
    fh.flush()
    return fh


#: Pauses before try_lock gives up on a busy lock: a waiting job's probe (lock_is_held)
#: takes the lock shared for a moment, which must not read as a writer.
LOCK_RETRY_S = (0.01, 0.05)


def lock_is_held(path: Path) -> bool:
    """Whether a process holds the lock of cache file ``path`` (a killed one's lock went
    with it). Probed with a shared lock taken and dropped at once, so the probe never
    writes the lock file (which names its holder)."""
    try:
        fh = open(path.with_name(path.name + ".lock"), "rb")
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False


PLAN_SUFFIX = ".plan"  # <cache file>.plan: the keys its writer is asking (RawStore.claim)


def plan_path(path: Path) -> Path:
    """``<file>.plan`` beside a cache file: the keys its writer is about to ask."""
    return path.with_name(path.name + PLAN_SUFFIX)


@dataclass(frozen=True)
class Plan:
    """What one live writer of a shared cache said it is asking (RawStore.claim): its
    pid, its label (the study's shard name), when it said so and the keys. ``keys`` is
    None for the holder of the shared file that has not said yet."""

    path: Path
    pid: str
    label: str
    order: tuple[int, str]
    keys: frozenset[str] | None


def read_plan(path: Path) -> Plan | None:
    """The plan written at ``path`` (a cache file's .plan), or None when absent or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            head = json.loads(fh.readline())
            keys = frozenset(line.strip() for line in fh if line.strip())
    except (OSError, ValueError):
        return None
    if not isinstance(head, dict):
        return None
    label, pid = str(head.get("label") or ""), str(head.get("pid") or "")
    return Plan(path, pid, label, (int(head.get("order_ns") or 0), f"{label}:{pid}"), keys)


def lock_holder(path: Path) -> str:
    """' (process N)' for the job holding a cache file's lock (the pid try_lock wrote), or
    '' when the lock file does not say: for the line that tells a second start to wait."""
    try:
        pid = path.with_name(path.name + ".lock").read_text(encoding="utf-8").split()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        return ""
    return f" (process {pid})" if pid.isdigit() else ""


def release_lock(fh: Any) -> None:
    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    fh.close()
