"""Queries without an answer: the line each leaves in ``<task>.failures.jsonl``, the
tally of a job's loop, and the stops (the server looks down; some queries are still
unanswered) that end a job with EXIT_INCOMPLETE and say how to resume.

Failures come in two kinds. A transient one (a 5xx, a timeout, an incomplete reply) is
asked again. A permanent one (a 4xx other than 408/409/429, a content refusal: no retry
changes the reply) is recorded once with ``permanent: true`` and not asked again unless
the job is run with ``--retry-failed``; its row is excluded from the panel and counted,
and the job goes on with every other row."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_jobs.queries import Query, QueryPlan, keys_of
from lookahead.cache.files import utc_now
from lookahead.cache.store import RawStore
from lookahead.errors import RESUME
from lookahead.guard import EXIT_INCOMPLETE, JobStop
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
    failures: Counter = field(default_factory=Counter)  # reason -> queries (transient: asked again)
    refused: Counter = field(default_factory=Counter)  # reason -> queries (permanent: not asked again)
    in_a_row: int = 0  # queries without an answer since the last one written

    def count(self, reason: str | None, permanent: bool) -> None:
        """Count one settled query: its answer written (``reason`` None or empty), or no
        answer for ``reason``, permanent (recorded once, not asked again) or not. Every
        query loop counts through here, so the stop rule (:attr:`server_down`) reads the
        same run of failures whatever runs the queries."""
        if not reason:
            self.written += 1
            self.in_a_row = 0
            return
        (self.refused if permanent else self.failures)[reason] += 1
        self.in_a_row += 1

    @property
    def server_down(self) -> bool:
        """The last STOP_AFTER_FAILURES_IN_A_ROW queries (all of them, for fewer pending)
        failed and some are still to ask: the server is taken to be down."""
        settled = self.written + self.n_failed + self.n_refused
        return self.in_a_row >= min(STOP_AFTER_FAILURES_IN_A_ROW, self.n_pending) and settled < self.n_pending

    def add(self, other: QueryTally) -> None:
        """Count another pass's queries and results into this tally."""
        self.n_pending += other.n_pending
        self.written += other.written
        self.failures.update(other.failures)
        self.refused.update(other.refused)

    @property
    def n_failed(self) -> int:
        return sum(self.failures.values())

    @property
    def n_refused(self) -> int:
        return sum(self.refused.values())

    def reasons(self) -> str:
        return "; ".join(f"{n} x {r}" for r, n in (self.failures + self.refused).most_common(3))


def failure_record(
    task: str, q: Query, rec: dict[str, Any], reason: str, attempts: int, permanent: bool = False
) -> dict[str, Any]:
    """One line of ``<task>.failures.jsonl``: the key, what it was, why there is no answer,
    and whether a retry could change that (``permanent``: it could not)."""
    return {
        "key": q.key,
        "task": task,
        "model_id": rec.get("model_id"),
        "row_id": q.row_id,
        "entity_id": q.entity_id,
        "target_date": q.target_date,
        "params": rec.get("params"),
        "reason": mask(reason),
        "attempts": int(attempts),
        "failed_at": utc_now(),
        "permanent": bool(permanent),
    }


def refused_keys(store: RawStore) -> dict[str, str]:
    """key -> reason of every query whose latest failure line is permanent (a later
    transient line, from a ``--retry-failed`` run, makes it pending again)."""
    latest: dict[str, str | None] = {}
    path = store.failures_path
    if not path.exists():
        return {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a torn line: the store moved the last one aside
            if isinstance(rec, dict) and isinstance(rec.get("key"), str):
                latest[rec["key"]] = str(rec.get("reason") or "") if rec.get("permanent") is True else None
    return {k: r for k, r in latest.items() if r is not None}


def without_refused(store: RawStore, pending: Sequence[Query]) -> Sequence[Query]:
    """``pending`` less the queries whose latest failure is permanent (no line printed)."""
    refused = refused_keys(store)
    if not refused:
        return pending
    at = [i for i, k in enumerate(keys_of(pending)) if k not in refused]
    if len(at) == len(pending):
        return pending
    return pending.take(at) if isinstance(pending, QueryPlan) else [pending[i] for i in at]


def skip_refused(task: str, store: RawStore, pending: Sequence[Query], retry_failed: bool) -> Sequence[Query]:
    """``pending`` without the queries refused for good in an earlier run (one line says
    how many and why), or all of them with ``--retry-failed``."""
    refused = refused_keys(store)
    if not refused:
        return pending
    at = [i for i, k in enumerate(keys_of(pending)) if k not in refused]
    n = len(pending) - len(at)
    if not n:
        return pending
    if retry_failed:
        print(f"{task}: asking again {n} queries the server refused for good in an earlier run (--retry-failed)")
        return pending
    reasons = Counter(refused[k] for k in keys_of(pending) if k in refused)
    shown = "; ".join(f"{c} x {r}" for r, c in reasons.most_common(3))
    print(
        f"{task}: {n} queries the server refused for good in an earlier run ({shown}) are not asked "
        "again (--retry-failed asks them); their rows are excluded and counted"
    )
    return pending.take(at) if isinstance(pending, QueryPlan) else [pending[i] for i in at]


def too_many_failures(desc: str, tally: QueryTally, store: RawStore) -> JobStop:
    return JobStop(
        f"{desc}: the last {tally.in_a_row} queries all failed ({tally.reasons()}); the server "
        f"looks down or is refusing. {tally.written} of {tally.n_pending} answered and saved; "
        f"failures recorded in {store.failures_path}; {RESUME}.",
        EXIT_INCOMPLETE,
    )


def require_complete(tally: QueryTally, store: RawStore) -> None:
    """Stop the job (non-zero exit, one line) when some queries have no answer yet and a
    rerun may still get one; say in one line how many the server refused for good (those
    rows are excluded and counted: no rerun changes them)."""
    if tally.n_refused:
        shown = "; ".join(f"{n} x {r}" for r, n in tally.refused.most_common(3))
        print(
            f"{tally.task}: {tally.n_refused} of {tally.n_pending} queries refused for good ({shown}); "
            f"recorded in {store.failures_path}, not asked again (--retry-failed asks them); "
            "their rows are excluded and counted"
        )
    if tally.n_failed:
        raise JobStop(
            f"{tally.task}: {tally.n_failed} of {tally.n_pending} queries got no complete answer "
            f"within the retry bound ({tally.reasons()}); {tally.written} answered and saved; "
            f"failures recorded in {store.failures_path}; {RESUME}.",
            EXIT_INCOMPLETE,
        )
