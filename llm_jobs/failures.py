"""Queries without an answer: the line each leaves in ``<task>.failures.jsonl``, the
tally of a job's loop, and the stops (the server looks down; some queries are still
unanswered) that end a job with EXIT_INCOMPLETE and say how to resume."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from llm_jobs.context import Query
from lookahead.cache import RawStore, utc_now
from lookahead.guard import EXIT_INCOMPLETE, RESUME, JobStop
from lookahead.masking import mask

# This many failed queries in a row (no answer between them) mean the server is down or
# refusing: the job stops instead of paying the full retry bound for every query left.
STOP_AFTER_FAILURES_IN_A_ROW = 8


@dataclass
class QueryTally:
    """What one job's query loop achieved: answers written and queries without one."""

    task: str
    n_pending: int
    written: int = 0
    failures: Counter = field(default_factory=Counter)  # reason -> queries

    @property
    def n_failed(self) -> int:
        return sum(self.failures.values())

    def reasons(self) -> str:
        return "; ".join(f"{n} x {r}" for r, n in self.failures.most_common(3))


def failure_record(task: str, q: Query, rec: dict[str, Any], reason: str, attempts: int) -> dict[str, Any]:
    """One line of ``<task>.failures.jsonl``: the key, what it was, why there is no answer."""
    return {
        "key": q.key, "task": task, "model_id": rec.get("model_id"), "row_id": q.row_id,
        "entity_id": q.entity_id, "target_date": q.target_date, "params": rec.get("params"),
        "reason": mask(reason), "attempts": int(attempts), "failed_at": utc_now(),
    }


def too_many_failures(desc: str, in_a_row: int, tally: QueryTally, store: RawStore) -> JobStop:
    return JobStop(
        f"{desc}: the last {in_a_row} queries all failed ({tally.reasons()}); the server "
        f"looks down or is refusing. {tally.written} of {tally.n_pending} answered and saved; "
        f"failures recorded in {store.failures_path}; {RESUME}.", EXIT_INCOMPLETE)


def require_complete(tally: QueryTally, store: RawStore) -> None:
    """Stop the job (non-zero exit, one line) when some queries have no answer yet."""
    if tally.n_failed:
        raise JobStop(
            f"{tally.task}: {tally.n_failed} of {tally.n_pending} queries got no complete answer "
            f"within the retry bound ({tally.reasons()}); {tally.written} answered and saved; "
            f"failures recorded in {store.failures_path}; {RESUME}.", EXIT_INCOMPLETE)
