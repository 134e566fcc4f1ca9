"""Where a job's pending queries are asked: the study's setting ``runner`` names an entry
of :data:`RUNNERS`. ``local`` is the loop in this process (llm_jobs.query_loop); ``ray``
hands the queries to Ray Data workers that each append to their own cache shard
(llm_jobs.ray_runner). Both write the same lines under the same guarantees and return
the same tally."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llm_jobs.context import JobContext, Query
from llm_jobs.failures import QueryTally
from llm_jobs.query_loop import Answer, record_skeleton, run_queries
from llm_jobs.ray_runner import run_queries_ray
from llm_jobs.sharing import ask_unclaimed
from lookahead.cache import RawStore

Runner = Callable[[JobContext, RawStore, Sequence[Query], str, Answer, Callable[[Query], dict[str, Any]]],
                  QueryTally]


def run_local(ctx: JobContext, store: RawStore, pending: Sequence[Query], task: str, answer: Answer,
              base_record: Callable[[Query], dict[str, Any]]) -> QueryTally:
    """The single-process loop (llm_jobs.query_loop.run_queries) on the study's backend."""
    return run_queries(store, pending, ctx.batch_size, task, lambda batch: answer(ctx.backend, batch),
                       base_record, ctx.backend)


RUNNERS: dict[str, Runner] = {"local": run_local, "ray": run_queries_ray}


def query_all(ctx: JobContext, store: RawStore, pending: Sequence[Query], task: str, answer: Answer,
              params: dict[str, Any]) -> QueryTally:
    """Ask every pending query on the study's runner, except those another study's job
    sharing raw_dir is asking (their answers are awaited: llm_jobs.sharing); each line
    starts from the contract's skeleton (llm_jobs.query_loop.record_skeleton) with the
    task's ``params``."""
    def base(q: Query) -> dict[str, Any]:
        return record_skeleton(ctx, task, q, params)

    runner = RUNNERS[str(ctx.study.runner.runner)]
    # another study's job on the same raw_dir may be asking some of them: those are
    # waited for, not asked twice (llm_jobs.sharing)
    return ask_unclaimed(ctx, store, task, pending, lambda qs: runner(ctx, store, qs, task, answer, base))
