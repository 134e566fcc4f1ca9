"""Protocol step 1: the forecast signal mu_hat from the user's own prompt.

Run alone: ``lookahead jobs --study FILE --only forecast --yes`` (else with the study's other jobs)

The prompt and the label mapping are used verbatim, at temperature 0. After the queries
the parse rate is reported; below 95% the job stops with a non-zero exit and shows the
first 10 unparsed answers (labels that match nothing stop it after the first
EARLY_PARSE_ANSWERS answers, before the rest are paid for), because the protocol forbids editing the prompt or parser to fix it.
To accept the prompt as the object under test, set ``accept_low_parse_rate: true`` in
the study file, or pass --accept-low-parse-rate to ``lookahead run`` (this run only):
that setting is what dbt and the report read (the gate then lets the unparsed rows
through, they are excluded and counted). No flag edits the study file.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from llm_jobs.context import JobContext, cached_fields, cached_records, not_cached, open_store, release_freed_memory
from llm_jobs.failures import refused_keys, require_complete, skip_refused
from llm_jobs.jobs_plan import not_answered_elsewhere, say_repaired
from llm_jobs.planning import confirm, fit_forecast_prompts, print_plan, row_queries
from llm_jobs.queries import Query, QueryPlan, keys_of
from llm_jobs.query_loop import logprob_dicts
from llm_jobs.runners import query_all
from lookahead.backends.base import Backend, QueryFailure
from lookahead.config import protocol_setting
from lookahead.guard import EXIT_OK, EXIT_PARSE_RATE, JobStop
from lookahead.keys import task_params
from lookahead.scoring import (
    MIN_PARSE_RATE,
    first_token_prob,
    parse_forecast,
    parse_stated_confidence,
    prompt_asks_confidence,
)

TASK = "forecast"
#: Labels that match nothing are caught early: the first this-many forecasts left to ask
#: are asked first, and a parse rate under the floor among them stops the job before the
#: rest are asked, instead of after every forecast was paid for. 50 answers put a 95% floor's miss at
#: three or more unparsed answers; a prompt whose labels fit parses nearly all of them.
EARLY_PARSE_ANSWERS = 50


def early_parse_stop(labels: dict[str, Any], records: Sequence[dict[str, Any]], total: int) -> None:
    """JobStop (exit 3) when the first answers parse under the protocol's floor: the
    labels match nothing the model says, and the remaining forecasts are not asked."""
    texts = [r.get("response_text") for r in records]
    parsed = sum(parse_forecast(x, labels)[0] is not None for x in texts)
    if not texts or parsed >= MIN_PARSE_RATE * len(texts):
        return
    shown = ", ".join(repr(x) for x in [x for x in texts if parse_forecast(x, labels)[0] is None][:3])
    raise JobStop(
        f"forecast: {parsed} of the first {len(texts)} answers match a label of forecast_labels "
        f"({', '.join(map(str, labels))}), under the {MIN_PARSE_RATE:.0%} parse-rate floor: stopped after "
        f"{len(texts)} of {total} forecasts, e.g. {shown}; those answers are cached. Check forecast_labels "
        "against the prompt (or set accept_low_parse_rate: true to keep the prompt as the object under test)",
        EXIT_PARSE_RATE,
    )


def plan(ctx: JobContext) -> tuple[QueryPlan, dict[str, Any]]:
    """One query per valid row, keyed by lookahead.keys (no model needed): (queries, params)."""
    params = task_params(ctx.study, TASK)
    return row_queries(ctx, TASK, params), params


def run(ctx: JobContext) -> int:
    queries, params = plan(ctx)
    release_freed_memory()  # the plan's Arrow columns: the queries stay, their making goes
    asks_conf = prompt_asks_confidence(str(ctx.study.prompts.forecast_prompt))
    with open_store(ctx, TASK) as store:
        say_repaired(store)
        uncached = skip_refused(TASK, store, not_cached(ctx, store, TASK, queries), retry_failed(ctx))
        uncached = not_answered_elsewhere(TASK, uncached)  # the plan counts a shared pass once (llm_jobs.fused)
        store.require_writable(len(uncached))  # before the model loads: nothing to ask, no lock needed
        store.claim(keys_of(uncached))  # another study sharing raw_dir waits for these (llm_jobs.sharing)
        pending = fit_forecast_prompts(ctx, ctx.for_backend(uncached))
        print_plan(ctx, TASK, "rows", len(queries), pending, params["max_tokens"])
        if pending:
            confirm(f"query {len(pending)} forecasts?", ctx.args.yes, ctx.destination)

            answer = functools.partial(
                forecast_answer, max_tokens=params["max_tokens"], top_logprobs=params["top_logprobs"], asks_conf=asks_conf
            )
            early = not (accepts_low_parse_rate(ctx) or ctx.args.accept_low_parse_rate)
            head = pending[:EARLY_PARSE_ANSWERS] if early else pending
            tally = query_all(ctx, store, head, TASK, answer, params)
            if len(head) < len(pending):  # the first answers decide whether the rest are asked
                early_parse_stop(
                    protocol_setting("forecast_labels", ctx.study.prompts.forecast_labels),
                    list(cached_records(ctx, store, TASK, head).values()),
                    len(pending),
                )
                tally.add(query_all(ctx, store, pending[len(head) :], TASK, answer, params))
            require_complete(tally, store)
        store.forget()  # the parse-rate check reads the lines themselves: the key index goes first
        release_freed_memory()  # and what the asking freed (the answers in flight)
        answers = cached_fields(ctx, store, TASK, queries, SUMMARY_FIELDS)
        refused = refused_keys(store)
    return summarize(ctx, queries, answers, refused)


def retry_failed(ctx: JobContext) -> bool:
    """--retry-failed: ask again the queries the server refused for good (llm_jobs.failures)."""
    return bool(getattr(ctx.args, "retry_failed", False))


def forecast_answer(
    backend: Backend, batch: list[Query], *, max_tokens: int, top_logprobs: int, asks_conf: bool
) -> list[dict[str, Any] | QueryFailure]:
    """One batch of forecasts: the answer text, the top log-probs at its first position,
    and the stated confidence when the prompt asks for one (llm_jobs.query_loop.Answer)."""
    gens = backend.try_generate([q.prompt for q in batch], max_tokens, top_logprobs)
    out: list[dict[str, Any] | QueryFailure] = []
    for g in gens:
        if isinstance(g, QueryFailure):
            out.append(g)
            continue
        top = logprob_dicts(g.top_logprobs)
        out.append(
            {
                "response_text": g.response_text,
                "top_logprobs": top,
                "first_token_prob": first_token_prob(top),
                "stated_confidence": parse_stated_confidence(g.response_text) if asks_conf else None,
            }
        )
    return out


#: The field of a forecast line the parse-rate check reads (lookahead.cache.load_fields):
#: not the prompt or the log-probs, which make most of a line.
SUMMARY_FIELDS = ("response_text",)
#: Unparsed answers shown when the parse rate is under the floor.
SHOWN_UNPARSED = 10


def summarize(
    ctx: JobContext,
    queries: Sequence[Query],
    answers: tuple[list[bool], dict[str, list[Any]]],
    refused: dict[str, str] | None = None,
) -> int:
    """Parse every answer with the user's labels and enforce the 95% parse-rate rule.

    Why no file: mu_hat, the label and the first-token probability that reach the
    regressions are read by dbt from the raw lines (stg_forecast_responses, int_forecasts,
    which parse with the same lookahead.scoring.parse_forecast); a copy written here was
    read by nothing. ``answers`` are the response texts of each query's line
    (llm_jobs.context.cached_fields). A row whose forecast the server refused for good
    (``refused``: key -> reason) has no answer and no forecast: it is excluded and counted,
    not taken for an unparsed answer."""
    labels = protocol_setting("forecast_labels", ctx.study.prompts.forecast_labels)
    found, cols = answers
    refused = refused or {}
    keys = list(keys_of(queries)) if refused else []
    excluded = {i for i, ok in enumerate(found) if not ok and refused and keys[i] in refused}
    missing = [i for i, ok in enumerate(found) if not ok and i not in excluded]
    if missing:
        raise JobStop(
            f"forecast: {len(missing)} rows have no answer in the cache (e.g. row_id "
            f"{queries[missing[0]].row_id}); run the same command again to ask them"
        )
    parse = functools.lru_cache(maxsize=4096)(lambda text: parse_forecast(text, labels)[0])
    counts: Counter[str] = Counter()
    n_parsed = 0
    unparsed: list[tuple[int, Any]] = []
    for i, text in enumerate(cols["response_text"]):
        if i in excluded:
            continue
        label = parse(text)
        if label is None:
            if len(unparsed) < SHOWN_UNPARSED:
                unparsed.append((i, text))
        else:
            n_parsed += 1
            counts[label] += 1
    if excluded:
        print(
            f"forecast: {len(excluded)} of {len(queries)} rows excluded: the server refused their "
            "forecast for good (counted in the report's exclusions)"
        )
    n = len(queries) - len(excluded)
    rate = n_parsed / n if n else 0.0
    print(f"forecast parse rate: {rate:.1%} ({n_parsed}/{n}); labels: {dict(counts.most_common())}")
    if rate < MIN_PARSE_RATE:
        n_unparsed = n - n_parsed
        print(
            f"parse rate below {MIN_PARSE_RATE:.0%}; {n_unparsed} unparsed answers"
            + (f", the first {min(SHOWN_UNPARSED, n_unparsed)}:" if n_unparsed > SHOWN_UNPARSED else ":"),
            file=sys.stderr,
        )
        for i, text in unparsed:
            print(f"  row_id {queries[i].row_id}: {text!r}", file=sys.stderr)
        accepted = accepts_low_parse_rate(ctx)
        if ctx.args.accept_low_parse_rate and not accepted:
            accepted = True  # this run only: the study file is never edited
            print(
                "accepted for this run (--accept-low-parse-rate); dbt build needs the same "
                "acceptance: `lookahead run --accept-low-parse-rate`, which records it in the "
                "build (study_settings) and the report"
            )
        if not accepted:
            raise JobStop(
                "forecast parse rate below 95%: the prompt and parser are not changed automatically "
                "(protocol step 1). Decide how to proceed; 'accept_low_parse_rate: true' in the "
                "study keeps the prompt as the object under test (the report then excludes and "
                "counts the unparsed rows).",
                EXIT_PARSE_RATE,
            )
        print(
            f"continuing below 95% (accept_low_parse_rate: true): {n_unparsed} unparsed "
            "rows will be excluded from the regressions and counted in the report"
        )
    return EXIT_OK


def accepts_low_parse_rate(ctx: JobContext) -> bool:
    """The study's accept_low_parse_rate setting (the record dbt and the report read)."""
    return ctx.study.runner.accept_low_parse_rate
