"""Where a job's pending queries are asked: the study's setting ``runner`` names an entry
of :data:`RUNNERS`. ``local`` is the loop in this process (llm_jobs.query_loop); ``ray``
hands the queries to Ray Data workers that each append to their own cache shard
(llm_jobs.ray_runner). Both write the same lines under the same guarantees and return
the same tally."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llm_jobs.context import JobContext, not_cached
from llm_jobs.failures import QueryTally, without_refused
from llm_jobs.queries import Query
from llm_jobs.query_loop import Answer, record_skeleton, run_queries
from llm_jobs.ray_runner import run_queries_ray
from llm_jobs.sharing import ask_unclaimed
from lookahead.cache.store import RawStore
from lookahead.stopping import should_stop

Runner = Callable[[JobContext, RawStore, Sequence[Query], str, Answer, Callable[[Query], dict[str, Any]]], QueryTally]


def run_local(
    ctx: JobContext,
    store: RawStore,
    pending: Sequence[Query],
    task: str,
    answer: Answer,
    base_record: Callable[[Query], dict[str, Any]],
) -> QueryTally:
    """The single-process loop (llm_jobs.query_loop.run_queries) on the study's backend."""
    return run_queries(store, pending, ctx.batch_size, task, lambda batch: answer(ctx.backend, batch), base_record, ctx.backend)


RUNNERS: dict[str, Runner] = {"local": run_local, "ray": run_queries_ray}


def query_all(
    ctx: JobContext, store: RawStore, pending: Sequence[Query], task: str, answer: Answer, params: dict[str, Any]
) -> QueryTally:
    """Ask every pending query on the study's runner, except those another study's job
    sharing raw_dir is asking (their answers are awaited: llm_jobs.sharing); each line
    starts from the contract's skeleton (llm_jobs.query_loop.record_skeleton) with the
    task's ``params``."""

    def base(q: Query) -> dict[str, Any]:
        return record_skeleton(ctx, task, q, params)

    runner = RUNNERS[str(ctx.study.runner.runner)]

    def ask(queries: Sequence[Query]) -> QueryTally:
        # another study's job on the same raw_dir may be asking some of them: those are
        # waited for, not asked twice (llm_jobs.sharing)
        return ask_unclaimed(ctx, store, task, queries, lambda qs: runner(ctx, store, qs, task, answer, base))

    tally = ask(pending)
    return another_pass(ctx, store, task, pending, tally, ask)


def another_pass(
    ctx: JobContext,
    store: RawStore,
    task: str,
    pending: Sequence[Query],
    tally: QueryTally,
    ask: Callable[[Sequence[Query]], QueryTally],
) -> QueryTally:
    """Ask again, up to the setting failed_query_passes times, the queries of ``pending``
    that a transient failure left without an answer; the tally's failures are then those
    of the last pass.

    Why: a fault storm leaves a few queries failing at every one of the retry bound's
    attempts (0.4**7 of 1,846 queries is about 3), and each used to end the job with
    exit 4 and a rerun; another pass gives each the full bound again while the job still
    runs, so the storm ends in one command. A permanent failure is not asked again."""
    passes = int(ctx.study.runner.failed_query_passes)
    for n in range(1, passes + 1):
        if not tally.failures or should_stop():
            break
        left = without_refused(store, not_cached(ctx, store, task, pending))
        if not len(left):
            tally.failures.clear()
            break
        print(
            f"{task}: pass {n} of {passes} (setting failed_query_passes) over {len(left)} queries "
            f"still without an answer ({tally.reasons()})",
            flush=True,
        )
        again = ask(left)
        tally.written += again.written
        tally.refused.update(again.refused)
        tally.failures = again.failures
    return tally
