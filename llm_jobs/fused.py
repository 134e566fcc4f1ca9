"""A row's forecast and Min-K% scores from one forward pass over its prompt (transformers,
vLLM).

Run by ``python -m llm_jobs.run_all`` before the forecast and Min-K% jobs.

Why: the forecast job and the Min-K% job send the identical prompt (llm_jobs.mink), and
the answer is a few tokens, so reading the prompt is most of each request; the two jobs
read it twice. Here one pass over the prompt gives its token log-probs (with the
vocabulary moments, lookahead.measures) and the distribution after it, and the answer
continues from that pass's keys and values (Backend.generate_scored: on transformers its
own packed pass; on vLLM one request with ``prompt_logprobs`` beside ``logprobs``; on
`vllm serve` one completions request with vLLM's ``prompt_logprobs`` extra).

The answers are written as the two jobs write them, one forecast line and one Min-K% line
per row under each task's own key, so a cache written either way serves both, and the
forecast and Min-K% jobs that run next find these rows answered and summarise them. Only
rows whose forecast and Min-K% line are both missing are asked here; a row missing one
of them is asked by that task's job alone. Where the pass cannot be shared (a backend
outside lookahead.backends.FUSED_BACKENDS, the Ray runner, a model the packed fp32 body
does not run on transformers, a server whose prompt log-prob route is not vLLM's
``prompt_logprobs`` by the study's settings: docs/backends.md)
nothing is asked here and the two jobs ask as before. The plan before the confirmation
counts each row once, under ``forecast+mink`` (llm_jobs.jobs_plan.answered_elsewhere).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from llm_jobs import forecast, mink
from llm_jobs.context import JobContext, cached_records, not_cached, open_store
from llm_jobs.failures import require_complete, skip_refused
from llm_jobs.jobs_plan import answered_elsewhere
from llm_jobs.planning import confirm, fit_forecast_prompts, print_plan
from llm_jobs.queries import Query, QueryPlan, keys_of
from llm_jobs.query_loop import logprob_dicts, record_skeleton, settle
from llm_jobs.runners import query_all
from lookahead.backends import FUSED_BACKENDS, FUSED_SETTINGS
from lookahead.backends.base import Backend, QueryFailure
from lookahead.cache.files import utc_now
from lookahead.cache.store import RawStore
from lookahead.config import protocol_setting
from lookahead.guard import EXIT_OK
from lookahead.keys import sampling_fallback, task_params
from lookahead.measures import VOCAB_MOMENTS, ZLIB_BYTES, zlib_bytes
from lookahead.scoring import first_token_prob, parse_stated_confidence, prompt_asks_confidence

TASK = "forecast+mink"
TASKS = (forecast.TASK, mink.TASK)


def why_not(ctx: JobContext) -> str | None:
    """Why this study's rows cannot share a pass (None when they can), before any model
    is loaded: the backend, the runner, or a recall-by-sampling study."""
    kind = str(ctx.study.backend.backend)
    if kind not in FUSED_BACKENDS:
        return f"backend '{kind}' scores prompts in requests of their own"
    settings_reason = FUSED_SETTINGS[kind](ctx.study.backend) if kind in FUSED_SETTINGS else None
    if settings_reason:
        return f"backend '{kind}': {settings_reason}"
    if str(ctx.study.runner.runner) != "local":
        return f"runner '{ctx.study.runner.runner}' asks each task on its workers"
    if sampling_fallback(ctx.study):
        return "logprobs_available is false: Min-K% is not asked"
    return None


def rows_in_both(f_pending: Sequence[Query], m_pending: Sequence[Query]) -> tuple[Sequence[Query], dict[str, str]]:
    """The forecast queries of the rows whose Min-K% line is missing too, and each such
    row's Min-K% key (row_id -> key)."""
    m_rows = _row_ids(m_pending)
    m_key = dict(zip(m_rows, keys_of(m_pending), strict=False))
    f_rows = _row_ids(f_pending)
    at = [i for i, r in enumerate(f_rows) if r in m_key]
    both = f_pending.take(at) if isinstance(f_pending, QueryPlan) else [f_pending[i] for i in at]
    return both, {f_rows[i]: m_key[f_rows[i]] for i in at}


def _row_ids(queries: Sequence[Query]) -> list[str]:
    return queries.row_ids(0, len(queries)) if isinstance(queries, QueryPlan) else [str(q.row_id) for q in queries]


def run(ctx: JobContext) -> int:
    reason = why_not(ctx)
    if reason:
        print(f"{TASK}: not one pass ({reason}); each task asks its own")
        return EXIT_OK
    f_queries, f_params = forecast.plan(ctx)
    m_params = task_params(ctx.study, mink.TASK)
    m_queries = mink.plan(ctx, m_params)
    retry = forecast.retry_failed(ctx)
    with open_store(ctx, forecast.TASK) as f_store, open_store(ctx, mink.TASK) as m_store:
        f_left = skip_refused(forecast.TASK, f_store, not_cached(ctx, f_store, forecast.TASK, f_queries), retry)
        m_left = skip_refused(mink.TASK, m_store, not_cached(ctx, m_store, mink.TASK, m_queries), retry)
        both, m_keys = rows_in_both(f_left, m_left)
        if not len(both):
            print(f"{TASK}: no row misses both its forecast and its Min-K% line; each task asks what it misses")
            return EXIT_OK
        f_store.require_writable(len(both))
        m_store.require_writable(len(both))
        if not ctx.backend.fused_scoring():  # loads the model: it is asked next anyway
            print(
                f"{TASK}: not one pass (backend '{ctx.backend.name}' cannot answer and score these "
                "prompts in one request with these settings: docs/backends.md); each task asks its own"
            )
            return EXIT_OK
        f_store.claim(keys_of(both))
        m_store.claim(m_keys.values())
        pending = fit_forecast_prompts(ctx, ctx.for_backend(both))
        print_plan(ctx, TASK, "rows", len(f_queries), pending, f_params["max_tokens"])
        answered_elsewhere(forecast.TASK, keys_of(pending))
        answered_elsewhere(mink.TASK, (m_keys[r] for r in _row_ids(pending)))
        if not pending:
            return EXIT_OK
        confirm(f"answer and score {len(pending)} prompts in one pass each?", ctx.args.yes, ctx.destination)
        writer = MinkWriter(ctx, m_store, m_params, m_keys)

        def answer(backend: Backend, batch: list[Query]) -> list[dict[str, Any] | QueryFailure]:
            return fused_answer(
                backend,
                batch,
                writer,
                max_tokens=int(f_params["max_tokens"]),
                top_logprobs=int(f_params["top_logprobs"]),
                asks_conf=prompt_asks_confidence(str(ctx.study.prompts.forecast_prompt)),
            )

        early = not (forecast.accepts_low_parse_rate(ctx) or ctx.args.accept_low_parse_rate)
        head = pending[: forecast.EARLY_PARSE_ANSWERS] if early else pending
        tally = query_all(ctx, f_store, head, forecast.TASK, answer, f_params)
        if len(head) < len(pending):  # the first answers decide whether the rest are asked
            forecast.early_parse_stop(
                protocol_setting("forecast_labels", ctx.study.prompts.forecast_labels),
                list(cached_records(ctx, f_store, forecast.TASK, head).values()),
                len(pending),
            )
            tally.add(query_all(ctx, f_store, pending[len(head) :], forecast.TASK, answer, f_params))
        require_complete(tally, f_store)
    if writer.failed:
        print(f"{TASK}: {writer.failed} Min-K% lines not written here ({writer.reason}); the Min-K% job asks them")
    return EXIT_OK


class MinkWriter:
    """Writes the Min-K% line of a row answered in the shared pass, as the Min-K% job
    writes it (llm_jobs.query_loop.settle into the Min-K% store, under its own key)."""

    def __init__(self, ctx: JobContext, store: RawStore, params: dict[str, Any], keys: dict[str, str]) -> None:
        self.ctx, self.store, self.params, self.keys = ctx, store, params, keys
        self.extras = mink.line_writes(ctx, mink.TASK)
        self.failed = 0
        self.reason = ""
        # a server's requests are answered on the query loop's threads (one per request)
        self._lock = threading.Lock()

    def write(self, q: Query, entries: list[Any] | QueryFailure, started: str, finished: str) -> None:
        """The row's Min-K% line, or, for a request that failed, its line in
        mink.failures.jsonl (as the Min-K% job records it: a transient failure is asked
        again by the Min-K% job, a permanent one is not)."""
        mq = replace(q, key=self.keys[str(q.row_id)])
        rec: dict[str, Any] | QueryFailure
        if isinstance(entries, QueryFailure):
            rec = entries
        else:
            rec = {"prompt_logprobs": logprob_dicts(entries, VOCAB_MOMENTS in self.extras)}
            if ZLIB_BYTES in self.extras:
                rec["zlib_bytes"] = zlib_bytes(q.prompt)
        with self._lock:
            skeleton = record_skeleton(self.ctx, mink.TASK, mq, self.params)
            reason = settle(self.store, mink.TASK, mq, skeleton, rec, started, finished)
            if reason:
                self.failed += 1
                self.reason = reason


def fused_answer(
    backend: Backend, batch: list[Query], writer: MinkWriter, *, max_tokens: int, top_logprobs: int, asks_conf: bool
) -> list[dict[str, Any] | QueryFailure]:
    """One batch answered and scored in one pass each: the Min-K% lines written here, the
    forecast answers returned to the query loop (llm_jobs.forecast.forecast_answer's
    fields), which writes them. A request that failed (a server's, within its retry
    bound) is a QueryFailure for both tasks: the query loop records the forecast's, the
    writer the Min-K% line's."""
    started = utc_now()
    results = backend.try_generate_scored(
        [q.prompt for q in batch],
        max_tokens,
        top_logprobs,
        vocab_moments=VOCAB_MOMENTS in writer.extras,
    )
    finished = utc_now()
    out: list[dict[str, Any] | QueryFailure] = []
    for q, res in zip(batch, results, strict=True):
        if isinstance(res, QueryFailure):
            writer.write(q, res, started, finished)
            out.append(res)
            continue
        gen, entries = res
        writer.write(q, entries, started, finished)
        top = logprob_dicts(gen.top_logprobs)
        out.append(
            {
                "response_text": gen.response_text,
                "top_logprobs": top,
                "first_token_prob": first_token_prob(top),
                "stated_confidence": parse_stated_confidence(gen.response_text) if asks_conf else None,
            }
        )
    return out
