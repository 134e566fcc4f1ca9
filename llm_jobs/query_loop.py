"""The query loop: the crash-safety contract in practice.

Each answer is appended (fsynced) as soon as it arrives, before the next one is awaited
(a backend that answers a batch in one pass, a local model's forward pass, returns the
batch's answers together), and the plan counts only keys with an answer in the raw
file, so a killed job resumes where it stopped and never pays twice. Only complete
answers are appended; a query without one goes to ``<task>.failures.jsonl``
(llm_jobs.failures) and is asked again next run, unless the server refused it for good
(a permanent failure: recorded once, its row excluded and counted). The Ray runner (llm_jobs.ray_runner)
reuses :func:`answer_each` and :func:`settle` inside its workers; llm_jobs.runners picks
between the two.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from llm_jobs.context import JobContext
from llm_jobs.failures import QueryTally, failure_record, too_many_failures
from llm_jobs.queries import Query
from lookahead.backends import Backend
from lookahead.backends.base import QueryFailure
from lookahead.cache.files import utc_now
from lookahead.cache.store import IncompleteAnswer, RawStore
from lookahead.masking import mask
from lookahead.stopping import draining, raise_if_stopped, should_stop
from lookahead.tasks import LOGPROB_TOLERANCE, incomplete_reason

QUERY_LOG_ENV = "LOOKAHEAD_QUERY_LOG"  # optional: one line per key sent to the model


Answer = Callable[[Backend, list[Query]], list[dict[str, Any] | QueryFailure]]
"""A job's query: backend and a batch -> one answer (or QueryFailure) per query. A
module-level function (params bound with functools.partial), so that the Ray runner can
ship it to its workers."""


#: Answers a batch: one entry per query, in order, the fields of a complete answer or the
#: query's failure (a Sequence: a job's answerer may return a list of answers alone).
Answerer = Callable[[list[Query]], Sequence[dict[str, Any] | QueryFailure]]


def record_skeleton(ctx: JobContext, task: str, q: Query, params: dict[str, Any]) -> dict[str, Any]:
    """A raw line with every contract field present (docs/CONTRACTS.md)."""
    return {
        "key": q.key,
        "task": task,
        "model_id": ctx.study.backend.model_id,
        "backend": getattr(ctx.backend, "name", ctx.study.backend.backend),
        "row_id": q.row_id,
        "entity_id": q.entity_id,
        "target_date": q.target_date,
        "prompt": q.prompt,
        "query_text": q.text,
        "params": params if q.truncated_to is None else {**params, "text_truncated_to_chars": q.truncated_to},
        "response_text": None,
        "top_logprobs": None,
        "prompt_logprobs": None,
        "samples": None,
        "approximated": False,
        "first_token_prob": None,
        "stated_confidence": None,
        "started_at": None,
        "finished_at": None,
    }


def logprob_dicts(items: Sequence[Any], vocab_moments: bool = False) -> list[dict[str, Any]]:
    """TokenLogprob objects -> the contract's {token_id, token, logprob} dicts (with
    vocab_mean and vocab_var when asked: lookahead.measures)."""
    if vocab_moments:
        return [
            {"token_id": t.token_id, "token": t.token, "logprob": t.logprob, "vocab_mean": t.vocab_mean, "vocab_var": t.vocab_var}
            for t in items
        ]
    return [{"token_id": t.token_id, "token": t.token, "logprob": t.logprob} for t in items]


def progress_bar(total: int, desc: str) -> Any:
    """tqdm bar with count, rate and ETA on stderr."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="q",
        file=sys.stderr,
        dynamic_ncols=True,
        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]",
    )


def log_queries(batch: Sequence[Query], log_path: str | None = None) -> None:
    """One line per key about to be sent, when LOOKAHEAD_QUERY_LOG (or ``log_path``)
    names a file (tests prove with it that no written key is asked again)."""
    log_path = log_path or os.environ.get(QUERY_LOG_ENV)
    if log_path:
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write("".join(f"{q.key}\n" for q in batch))
            fh.flush()


def settle(
    store: RawStore, desc: str, q: Query, rec: dict[str, Any], res: dict[str, Any] | QueryFailure, started: str, finished: str
) -> str | None:
    """Append a complete answer to ``store``, or record why there is none; return that
    reason (None when the answer was written)."""
    attempts, permanent = 1, False
    reason: str | None
    if isinstance(res, QueryFailure):
        reason, attempts, permanent = res.reason, res.attempts, res.permanent
    else:
        rec.update(res)
        rec["started_at"], rec["finished_at"] = started, finished
        reason = incomplete_reason(rec)
    if not reason:
        try:
            store.append(rec)
            return None
        except IncompleteAnswer as err:  # refused at the door (a line too long for the build)
            reason = str(err).split(": ", 1)[-1]
    store.record_failure(failure_record(desc, q, rec, reason, attempts, permanent))
    return mask(reason)


def answer_each(
    answer: Answerer,
    queries: Sequence[Query],
    batch_size: int,
    streams: int,
    on_answer: Callable[[Query, dict[str, Any] | QueryFailure, str, str], bool],
    log_path: str | None = None,
) -> None:
    """Ask every query and hand each answer to ``on_answer`` (which writes it) as soon as
    it arrives, before the next one is awaited; ``on_answer`` returning False stops asking
    (answers already in flight are still handed over: they are paid for).

    streams = 0: batches of ``batch_size`` (a local model answers a batch in one pass,
    so its answers arrive together). streams = n > 0 (a remote server, n concurrent
    requests): one query per request, at most n in flight, so a kill loses at most the
    requests in flight, not a batch of answers already received.

    Asked to stop (SIGINT, SIGTERM, or the wrapper that started the job is gone:
    lookahead.stopping), it asks nothing new, hands over the answers in flight, and then
    ends the job as an interrupt."""
    with draining():
        _answer_each(answer, queries, batch_size, streams, on_answer, log_path)
    raise_if_stopped()


def _answer_each(
    answer: Answerer,
    queries: Sequence[Query],
    batch_size: int,
    streams: int,
    on_answer: Callable[[Query, dict[str, Any] | QueryFailure, str, str], bool],
    log_path: str | None,
) -> None:
    if streams <= 0:
        for a in range(0, len(queries), batch_size):
            if should_stop():
                return
            batch = list(queries[a : a + batch_size])
            log_queries(batch, log_path)
            started = utc_now()
            results = answer(batch)
            finished = utc_now()
            go_on = True
            for q, res in zip(batch, results, strict=True):
                go_on = on_answer(q, res, started, finished) and go_on
            if not go_on:
                return
        return
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    todo = iter(queries)
    in_flight: dict[Any, tuple[Query, str]] = {}
    with ThreadPoolExecutor(max_workers=streams, thread_name_prefix="query") as pool:

        def submit() -> None:
            if should_stop():  # between requests: a signal, or the wrapper is gone
                return
            q = next(todo, None)
            if q is not None:
                log_queries([q], log_path)
                in_flight[pool.submit(answer, [q])] = (q, utc_now())

        for _ in range(streams):
            submit()
        go_on = True
        fatal: BaseException | None = None
        while in_flight:
            done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
            for fut in done:
                q, started = in_flight.pop(fut)
                try:
                    res = fut.result()[0]
                except BaseException as exc:
                    # a BackendFatal (a 401, say) ends the job, but only after every answer
                    # still in flight is written: those are paid for, and a rerun must not
                    # ask them again
                    fatal = fatal or exc
                    continue
                go_on = on_answer(q, res, started, utc_now()) and go_on
                if go_on and fatal is None:
                    submit()
        if fatal is not None:
            raise fatal


def answer_streams(backend: Backend | None) -> int:
    """How many requests a backend keeps in flight (its setting concurrency), 0 for a
    backend that answers a batch in one pass."""
    return int(getattr(backend, "concurrency", 0) or 0)


def run_queries(
    store: RawStore,
    pending: Sequence[Query],
    batch_size: int,
    desc: str,
    answer: Answerer,
    base_record: Callable[[Query], dict[str, Any]],
    backend: Backend | None = None,
) -> QueryTally:
    """Ask every pending query (:func:`answer_each`); append each complete answer, record
    each failure, each as it arrives.

    Only complete answers reach the cache (lookahead.tasks.incomplete_reason); a query
    that got none within the backend's retry bound goes to ``<task>.failures.jsonl``
    and stays pending, so the next run asks it again. When the last
    STOP_AFTER_FAILURES_IN_A_ROW queries all failed the server is taken to be down and
    the loop stops (JobStop) instead of paying the retry bound for every query left."""
    tally = QueryTally(desc, len(pending))
    retries_before = int(getattr(backend, "retries_done", 0) or 0)
    clamped_before = store.clamped
    with progress_bar(len(pending), desc) as bar:

        def on_answer(q: Query, res: dict[str, Any] | QueryFailure, started: str, finished: str) -> bool:
            reason = settle(store, desc, q, base_record(q), res, started, finished)
            tally.count(reason, isinstance(res, QueryFailure) and res.permanent)
            bar.update(1)
            return not tally.server_down

        answer_each(answer, pending, batch_size, answer_streams(backend), on_answer)
        if tally.server_down:
            bar.close()
            raise too_many_failures(desc, tally, store)
    retries = int(getattr(backend, "retries_done", 0) or 0) - retries_before
    if store.clamped - clamped_before:
        print(
            f"{desc}: {store.clamped - clamped_before} log-probs in (0, {LOGPROB_TOLERANCE:g}] read as 0 "
            "(a server's rounding; each line counts its own in clamped_logprobs)"
        )
    if retries:
        print(
            f"{desc}: {retries} retries (rate limits, server errors, timeouts, malformed or "
            "incomplete replies); only complete answers were saved"
        )
    return tally
