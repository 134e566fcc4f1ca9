"""Min-K% LAP (paper eq. 1): token log-probabilities of each forecast prompt.

Run: ``python -m llm_jobs.mink --study FILE --yes``

The prompt is exactly what the forecast job sends (the user's prompt filled with the row
and wrapped in the chat template when used), because the paper scores "any text
provided to the model". One batched forward pass per batch stores every prompt token's
log-prob in the raw line (first token: null, it has no conditional probability); K and
the mean are applied afterwards, so changing mink_k or mink_mean needs no new queries.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from llm_jobs.cli import run_main
from llm_jobs.context import JobContext, cached_fields, not_cached, open_store
from llm_jobs.failures import refused_keys, require_complete, skip_refused
from llm_jobs.planning import confirm, fit_forecast_prompts, print_plan, row_queries
from llm_jobs.queries import Query, QueryPlan, keys_of
from llm_jobs.query_loop import logprob_dicts
from llm_jobs.run_plan import not_answered_elsewhere
from llm_jobs.runners import query_all
from lookahead.backends.base import Backend, QueryFailure
from lookahead.cache.atomic import atomic_write_parquet
from lookahead.guard import EXIT_OK, JobStop
from lookahead.keys import sampling_fallback, task_params
from lookahead.measures import VOCAB_MOMENTS, ZLIB_BYTES, line_extras, zlib_bytes
from lookahead.scoring import mink_lap

TASK = "mink"


def plan(ctx: JobContext, params: dict[str, Any], task: str = TASK) -> QueryPlan:
    """The forecast job's prompts, one scoring query per row (same guards and cut)."""
    return row_queries(ctx, task, params)


def lap_summary(lap: pd.Series) -> str:
    """'mean=... quartiles=[...]' in four significant digits, not four decimals: a small
    model's Min-K% LAP (a probability of its least likely tokens, e.g. 3e-06) printed as
    0.0000 [0, 0, 0]."""
    qs = ", ".join(f"{q:.4g}" for q in lap.quantile([0.25, 0.5, 0.75]))
    return f"mean={lap.mean():.4g} quartiles=[{qs}]"


def run(ctx: JobContext) -> int:
    k, mean = ctx.study.measures.mink_k, ctx.study.measures.mink_mean
    queries, values = score_prompts(
        ctx,
        TASK,
        task_params(ctx.study, TASK),
        {"lap_mink": lambda rec: mink_lap(token_logprobs(rec), k, mean), "n_tokens": lambda rec: len(rec["prompt_logprobs"])},
    )
    return summarize(ctx, queries, values)


def token_logprobs(rec: dict[str, Any]) -> list[float | None]:
    """A Min-K% line's log-prob of each prompt token (the first None: it has no condition)."""
    return [t["logprob"] for t in rec["prompt_logprobs"]]


def score_prompts(
    ctx: JobContext, task: str, params: dict[str, Any], derived: Mapping[str, Callable[[dict[str, Any]], Any]]
) -> tuple[QueryPlan, dict[str, list[Any]]]:
    """Every forecast prompt's token log-probs under `ctx`'s model, cached in `task`'s raw
    file: the Min-K% job, and the reference job (llm_jobs.reference) with the reference
    model's context. Returns the plan and, per query, the ``derived`` values of its line
    (llm_jobs.context.cached_fields): a line's log-probs are let go as it is read, so a
    million rows' summary holds a few numbers a row, not every prompt's log-probs."""
    if sampling_fallback(ctx.study):
        raise JobStop("Min-K% needs prompt log-probabilities and logprobs_available is false; use lap_measure: recall")
    queries = plan(ctx, params, task)
    with open_store(ctx, task) as store:
        if store.repaired_bytes:
            print(f"repaired a torn last line in {store.path} ({store.repaired_bytes} bytes moved aside)")
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
        store.forget()  # the summary reads the lines themselves: the key index goes first
        found, values = cached_fields(ctx, store, task, queries, (), derived)
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
    return queries, values


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


def summarize(ctx: JobContext, queries: QueryPlan, values: dict[str, list[Any]]) -> int:
    """outputs/<study>/mink.parquet: each row's Min-K% LAP and token count (``values``,
    read from its line by :func:`score_prompts`)."""
    k, mean = ctx.study.measures.mink_k, ctx.study.measures.mink_mean
    df = pd.DataFrame(
        {
            "row_id": queries.row_ids(),
            "lap_mink": pd.Series(values["lap_mink"], dtype="float64"),
            "n_tokens": pd.Series(values["n_tokens"], dtype="Int64"),
            "mink_k": k,
            "mink_mean": mean,
            "raw_key": queries.keys.to_pylist(),
        }
    )
    atomic_write_parquet(ctx.out_dir() / "mink.parquet", df)
    print(f"Min-K% LAP (K={k:g}, {mean} mean, first token skipped): n={len(df)} {lap_summary(df['lap_mink'])}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(run, "Min-K% LAP over the forecast prompts (paper eq. 1; raw JSONL).", argv)


if __name__ == "__main__":
    sys.exit(main())
