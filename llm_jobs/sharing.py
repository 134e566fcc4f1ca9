"""Two or more studies sharing one ``raw_dir`` at the same time: every key asked once.

Why: studies that share a raw_dir share answers (a key covers task, model, row, exact
prompt and parameters, not the study), and a query costs money. One job holds
``<raw_dir>/<task>.jsonl``; a job of another study appends to its own shard
(lookahead.cache.store.RawStore, ``shards/study-<name>-<hash>/``). Appending apart is not
enough: both would ask the keys their studies share. So each job says which keys it is
about to ask (RawStore.claim: ``<its file>.plan``), and :func:`ask_unclaimed` asks its
own keys first, then waits for the answers to keys an earlier job said it asks, reading
them as they are written (RawStore.refresh), and asks itself whatever is left when that
job ends (finished, stopped or killed: its lock goes with it).

No coordinator and no deadlock: a job waits only for plans said before its own
(RawStore.earlier_plans), so the first job never waits and no two wait for each other.
A second job of the same study still stops (it would ask its own queries twice).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from llm_jobs.context import JobContext, not_cached
from llm_jobs.failures import QueryTally
from llm_jobs.queries import Query
from lookahead.cache.locks import Plan
from lookahead.cache.store import RawStore
from lookahead.stopping import STOP, draining, raise_if_stopped, should_stop

#: How often a waiting job looks for the answers it waits for (a refresh reads only what
#: the shards gained since the last look).
POLL_S = 0.5


def study_of(label: str) -> str:
    """The study named by a writer's label (llm_jobs.context.study_shard: study-<name>-<hash>)."""
    m = re.fullmatch(r"study-(.+)-[0-9a-f]{8}", label)
    return m.group(1) if m else (label or "another study")


def waiting_line(waiting: Sequence[Query], plans: Sequence[Plan]) -> str:
    """One line: how many queries are waited for, and whose job asks them."""
    plan = max(plans, key=lambda p: sum(q.key in p.keys for q in waiting) if p.keys is not None else len(waiting))
    pid = f" (pid {plan.pid})" if plan.pid else ""
    if plan.keys is None:
        return (
            f"{len(waiting)} queries may be asked by study {study_of(plan.label)}'s job{pid}, which holds "
            f"{plan.path.name[: -len('.plan')]} and has not said which yet; waiting for its plan"
        )
    n = sum(q.key in plan.keys for q in waiting)
    return f"{n} queries are being asked by study {study_of(plan.label)}'s job{pid}; waiting for its answers"


def ask_unclaimed(
    ctx: JobContext,
    store: RawStore,
    task: str,
    pending: Sequence[Query],
    ask: Callable[[Sequence[Query]], QueryTally],
    poll_s: float = POLL_S,
) -> QueryTally:
    """Ask the pending queries that no earlier job of another study is asking (``ask``,
    the study's runner), then wait for the answers to the rest; ask any whose job ended
    without answering. Returns the tally of what this job asked.

    Ctrl-C or SIGTERM while waiting stops the job as in the query loop
    (lookahead.stopping: finished answers are saved)."""
    tally = QueryTally(task, len(pending))
    waiting = pending  # a plan stays one (llm_jobs.queries.QueryPlan): no Query object a row
    by_others = 0
    said: list[tuple[str, bool]] = []
    with draining():
        while waiting and not should_stop():
            store.refresh()
            left = not_cached(ctx, store, task, waiting)
            by_others += len(waiting) - len(left)
            waiting = left
            if not waiting:
                break
            plans = store.earlier_plans()
            mine: Sequence[Query]
            if any(p.keys is None for p in plans):
                mine = []  # the holder has not said what it asks yet: it will, in a moment
            else:
                claimed = set().union(*(p.keys for p in plans if p.keys is not None))
                mine = [q for q in waiting if q.key not in claimed] if claimed else waiting
            if mine:
                part = ask(mine)
                tally.written += part.written
                tally.failures.update(part.failures)
                tally.refused.update(part.refused)
                if mine is waiting:  # asked once: a failure stays for the next run
                    break
                asked = {q.key for q in mine}
                waiting = [q for q in waiting if q.key not in asked]
                continue
            whose = sorted((p.pid, p.keys is None) for p in plans)
            if whose != said:  # one line per job waited for (not one per answer that arrives)
                print(waiting_line(waiting, plans), flush=True)
                said = whose
            STOP.wait(poll_s)
    raise_if_stopped()
    if by_others:
        print(
            f"{task}: {by_others} queries answered by another study's job sharing raw_dir {store.root} (not asked again)",
            flush=True,
        )
    return tally
