"""Min-K% LAP (paper eq. 1): token log-probabilities of each forecast prompt.

Run alone: ``lookahead jobs --study FILE --only mink --yes`` (else with the study's other jobs)

The prompt is exactly what the forecast job sends (the user's prompt filled with the row
and wrapped in the chat template when used), because the paper scores "any text
provided to the model". One batched forward pass per batch stores every prompt token's
log-prob in the raw line (first token: null, it has no conditional probability); K and
the mean are applied afterwards, so changing mink_k or mink_mean needs no new queries.
"""

from __future__ import annotations

import functools
from typing import Any

from llm_jobs.context import JobContext, cached_fields, not_cached, open_store
from llm_jobs.failures import refused_keys, require_complete, skip_refused
from llm_jobs.jobs_plan import not_answered_elsewhere, say_repaired
from llm_jobs.planning import confirm, fit_forecast_prompts, print_plan, row_queries
from llm_jobs.queries import Query, QueryPlan, keys_of
from llm_jobs.query_loop import logprob_dicts
from llm_jobs.runners import query_all
from lookahead.backends.base import Backend, QueryFailure
from lookahead.guard import EXIT_OK, JobStop
from lookahead.keys import sampling_fallback, task_params
from lookahead.measures import VOCAB_MOMENTS, ZLIB_BYTES, line_extras, zlib_bytes

TASK = "mink"


def plan(ctx: JobContext, params: dict[str, Any], task: str = TASK) -> QueryPlan:
    """The forecast job's prompts, one scoring query per row (same guards and cut)."""
    return row_queries(ctx, task, params)


def run(ctx: JobContext) -> int:
    queries = score_prompts(ctx, TASK, task_params(ctx.study, TASK))
    k, mean = ctx.study.measures.mink_k, ctx.study.measures.mink_mean
    print(
        f"Min-K%: {len(queries)} prompts scored; dbt build computes the Min-K% LAP from their lines "
        f"(K={k:g}, {mean} mean, first token skipped: stg_mink_scores, int_mink_scores)"
    )
    return EXIT_OK


def score_prompts(ctx: JobContext, task: str, params: dict[str, Any]) -> QueryPlan:
    """Every forecast prompt's token log-probs under `ctx`'s model, cached in `task`'s raw
    file: the Min-K% job, and the reference job (llm_jobs.reference) with the reference
    model's context. Returns the plan once every query has its line (or was refused for
    good). Nothing is scored here: the measures are computed once, by dbt, from the lines
    (stg_mink_scores and the measures' models)."""
    if sampling_fallback(ctx.study):
        raise JobStop("Min-K% needs prompt log-probabilities and logprobs_available is false; use lap_measure: recall")
    queries = plan(ctx, params, task)
    with open_store(ctx, task) as store:
        say_repaired(store)
        uncached = skip_refused(
            task, store, not_cached(ctx, store, task, queries), bool(getattr(ctx.args, "retry_failed", False))
        )
        uncached = not_answered_elsewhere(task, uncached)  # the plan counts a shared pass once (llm_jobs.fused)
        store.require_writable(len(uncached))  # before the model loads: nothing to ask, no lock needed
        store.claim(keys_of(uncached))  # another study sharing raw_dir waits for these (llm_jobs.sharing)
        pending = fit_forecast_prompts(ctx, ctx.for_backend(uncached))
        print_plan(ctx, task, "prompts", len(queries), pending, 0)
        if pending:
            confirm(f"score {len(pending)} prompts?", ctx.args.yes, ctx.destination)

            answer = functools.partial(mink_answer, extras=line_writes(ctx, task))
            tally = query_all(ctx, store, pending, task, answer, params)
            require_complete(tally, store)
        store.forget()  # the completeness check reads the lines themselves: the key index goes first
        found, _ = cached_fields(ctx, store, task, queries, ())
        refused = refused_keys(store) if not all(found) else {}
    if not all(found):
        keys = queries.keys.to_pylist()
        missing = [i for i, ok in enumerate(found) if not ok and keys[i] not in refused]
        if missing:
            raise JobStop(
                f"{task}: {len(missing)} prompts have no answer in the cache (e.g. row_id "
                f"{queries[missing[0]].row_id}); run the same command again to ask them"
            )
        print(
            f"{task}: {found.count(False)} of {len(found)} prompts excluded: the server refused them "
            "for good (counted in the report's exclusions)"
        )
    return queries


def line_writes(ctx: JobContext, task: str) -> tuple[str, ...]:
    """The extras a `task` line is written with (lookahead.tasks LINE_EXTRA_BITS): what the
    study's measures need, the zlib length always (it reads the prompt text only), and
    what the backend computes at almost no cost from the same pass (Backend.free_extras:
    the vocabulary moments on transformers, BENCHMARKS.md), so that a measure added later
    finds them in the line with nothing asked again. The reference model's lines carry
    none (only their log-probs are read)."""
    if task != TASK:
        return ()
    free = tuple(getattr(ctx.backend, "free_extras", ()))  # loaded by now: it fitted the prompts
    return tuple(sorted({*line_extras(ctx.study, task), ZLIB_BYTES, *free}))


def mink_answer(backend: Backend, batch: list[Query], extras: tuple[str, ...] = ()) -> list[dict[str, Any] | QueryFailure]:
    """One batch of prompts scored: every prompt token's log-prob (llm_jobs.query_loop.Answer), with
    what the study's other prompt measures need from the same pass (lookahead.measures:
    the vocabulary moments per position, the prompt's zlib length)."""
    moments = VOCAB_MOMENTS in extras
    lps = backend.try_prompt_logprobs([q.prompt for q in batch], **({"vocab_moments": True} if moments else {}))
    out: list[dict[str, Any] | QueryFailure] = []
    for q, lp in zip(batch, lps, strict=False):
        if isinstance(lp, QueryFailure):
            out.append(lp)
            continue
        rec: dict[str, Any] = {"prompt_logprobs": logprob_dicts(lp, moments)}
        if ZLIB_BYTES in extras:
            rec["zlib_bytes"] = zlib_bytes(q.prompt)
        out.append(rec)
    return out
