"""Planning a job before anything is paid for: the prompt guards (template leaks,
context length, cutting a too-long text), the plan (queries after dedupe and cache hits,
tokens and cost) and the confirmation."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from llm_jobs.context import JobContext
from llm_jobs.queries import Query, QueryPlan
from lookahead.backends import Backend
from lookahead.config import StudyConfigError
from lookahead.consent import Destination
from lookahead.guard import EXIT_DECLINED, JobStop

LOCAL_BACKENDS = ("transformers", "vllm")


def confirm(question: str, yes: bool, destination: Destination | None = None) -> None:
    """Ask before paying for queries; --yes answers for scripts and CI. An API backend's
    destination (host, remote or not, the key variable) is printed first: the person
    answering sees where the prompts go. --yes answers the cost question only; a remote
    host was allowed by --allow-remote before the backend was built (lookahead.consent).
    Under run_all the whole run was planned and confirmed once (llm_jobs.jobs_plan)."""
    from llm_jobs.jobs_plan import at_confirmation

    if destination is not None:
        print(destination.describe())
    if at_confirmation(question):
        return
    if yes:
        print(f"{question} yes (--yes)")
        return
    if not sys.stdin.isatty():
        raise JobStop("confirmation needed but stdin is not a terminal: rerun with --yes", EXIT_DECLINED)
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise JobStop("cancelled; nothing was queried", EXIT_DECLINED)


def prompt_token_limit(ctx: JobContext, output_tokens: int) -> tuple[int | None, Callable[[str], int] | None]:
    """(most prompt tokens a query may have, token counter), or (None, None) when the
    context length is unknown (then nothing can be checked and the job says so).

    The context length is the setting context_length, else what the backend knows
    (transformers: the model config; vLLM: max_model_len). The answer needs room too:
    at least one token, forecast_max_tokens for forecasts."""
    context = ctx.study.prompts.context_length
    if context is None:
        context = ctx.backend.context_length()
    if context is None:
        if "context_length" not in ctx.notes:
            from llm_jobs.jobs_plan import say_now

            ctx.notes.append("context_length")
            say_now(
                "note: prompt lengths not checked: the model's context length is unknown here (set context_length in the study)"
            )
        return None, None
    counter = getattr(ctx.backend, "count_tokens", None)
    if not callable(counter) or counter("x") is None:
        raise StudyConfigError(
            "setting 'tokenizer_path': prompts cannot be counted against the context length "
            f"({context} tokens) without the model's tokenizer; set tokenizer_path"
        )
    return context - max(1, int(output_tokens)), counter


def too_long_stop(
    task: str,
    too_long: Sequence[tuple[str, int]],
    n_total: int,
    limit: int,
    output_tokens: int,
    can_truncate: bool,
    n_too_long: int | None = None,
) -> JobStop:
    """One line naming the prompts that do not fit (``too_long``, or the first of
    ``n_too_long``), before anything is queried."""
    shown = ", ".join(f"{ident} ({n} tokens)" for ident, n in too_long[:3])
    fix = (
        "shorten the text, or set prompt_overflow: truncate_text (the text is cut to fit and the report counts the rows)"
        if can_truncate
        else "shorten the template"
    )
    return JobStop(
        f"{task}: {len(too_long) if n_too_long is None else n_too_long} of {n_total} prompts exceed the model's context length "
        f"({limit + max(1, output_tokens)} tokens, {max(1, output_tokens)} kept for the answer), "
        f"e.g. {shown}; nothing was queried. Fix: {fix}."
    )


def forecast_output_tokens(ctx: JobContext) -> int:
    """The forecast's answer budget; Min-K% scores the same prompts with the same budget,
    so both tasks cut a too-long text at the same place."""
    return int(ctx.study.prompts.forecast_max_tokens)


#: Rows rendered and keyed at a time when a job plans its queries.
PLAN_SLICE_ROWS = 65_536


def row_queries(ctx: JobContext, task: str, params: dict[str, Any]) -> QueryPlan:
    """One query per row over its forecast prompt (forecast and Min-K% ask the same prompt),
    keyed by lookahead.keys; the template guard runs first (no outcome, no target date).

    The plan is a :class:`~llm_jobs.queries.QueryPlan`: the keys as one Arrow column, the
    prompt rendered again from its row when a slice is read, so a million rows' plan is
    their keys (about 70 MB), not a million Query objects (about 480 MB)."""
    import pyarrow as pa

    from lookahead.keys import forecast_prompt_column, row_keys
    from lookahead.prompts import check_forecast_template

    template = str(ctx.study.prompts.forecast_prompt)
    check_forecast_template(template, ctx.study.column_map, ctx.study.prompts.forecast_prompt_allowed_columns)
    study = ctx.study

    def render(rows: Any) -> pa.Array:
        return forecast_prompt_column(study, rows)

    # a slice of rows at a time (each rendered and keyed column-wise): the Arrow columns and
    # text lists of every row at once were twice the plan itself on a large study
    keys = [
        row_keys(study, task, rows, params, render(rows))
        for rows in (ctx.rows.iloc[a : a + PLAN_SLICE_ROWS] for a in range(0, len(ctx.rows), PLAN_SLICE_ROWS))
    ]
    return QueryPlan(pa.chunked_array(keys, type=pa.string()), ctx.rows, render)


@dataclass
class FitTally:
    """What :func:`fit_forecast_prompts` found over several calls (`lookahead check` fits a
    large study's prompts a chunk of rows at a time): one stop, or one line, for all."""

    n_total: int = 0
    n_cut: int = 0
    too_long: list[tuple[str, int]] = field(default_factory=list)
    n_too_long: int = 0
    stop: tuple[int, int, bool] | None = None  # (limit, output tokens, can_truncate)

    def finish(self) -> None:
        if self.n_too_long and self.stop is not None:
            limit, out_tokens, can_truncate = self.stop
            raise too_long_stop("forecast prompt", self.too_long, self.n_total, limit, out_tokens, can_truncate, self.n_too_long)
        if self.n_cut:
            print(
                f"prompt_overflow: truncate_text: the text of {self.n_cut} of {self.n_total} rows was cut to "
                f"fit the context length (counted in the report)"
            )


def fit_forecast_prompts(ctx: JobContext, queries: Sequence[Query], tally: FitTally | None = None) -> Sequence[Query]:
    """Forecast or Min-K% queries about to be sent, checked against the context length.

    Guards run here, before any query: each prompt (chat template applied) must fit the
    context length; with prompt_overflow: truncate_text the text is cut (longest prefix
    that fits) and the kept length goes into the line's params, beside the key's params
    (the key is the uncut query's: the cut is fixed by the model, context_length and
    prompt_overflow, which the key covers). Both tasks cut a text at the same place.
    With ``tally`` the stop and the line are left to ``tally.finish()``."""
    from lookahead.prompts import render_forecast

    if not queries:  # everything cached: no context length to read, no model config loaded
        return []
    template = str(ctx.study.prompts.forecast_prompt)
    mode = ctx.study.prompts.prompt_overflow
    out_tokens = forecast_output_tokens(ctx)
    limit, count = prompt_token_limit(ctx, out_tokens)
    text_col = str(ctx.study.column_map["text"])
    if limit is None or count is None:
        return queries if isinstance(queries, QueryPlan) else list(queries)

    def render(row: dict[str, Any]) -> str:
        return ctx.backend.render_prompt(render_forecast(template, row), ctx.use_chat_template)

    out: list[Query] = []
    cut_at: dict[int, Query] = {}  # a plan keeps its columns: only the queries cut are held
    as_plan = isinstance(queries, QueryPlan)
    too_long: list[tuple[str, int]] = []
    for i, q in enumerate(queries):
        n, kept, prompt = count(q.prompt), None, q.prompt
        row = (q.row or ctx.input_row(q.row_id)) if n > limit and mode == "truncate_text" else None
        if row is not None:
            text = str(row.get("text") or "")
            base: dict[str, Any] = row

            def cut(k: int, row: dict[str, Any] = base) -> dict[str, Any]:
                return {**row, "text": text[:k], text_col: text[:k]}

            lo, hi = 0, len(text)
            if count(render(cut(0))) <= limit:
                while lo < hi:  # longest prefix that fits
                    mid = (lo + hi + 1) // 2
                    if count(render(cut(mid))) <= limit:
                        lo = mid
                    else:
                        hi = mid - 1
                kept = lo
                prompt = render(cut(kept))
                n = count(prompt)
        if n > limit:
            too_long.append((f"row {q.row_id}", n))
        fitted = q if kept is None else replace(q, prompt=prompt, truncated_to=kept)
        if not as_plan:
            out.append(fitted)
        elif fitted.truncated_to is not None:
            cut_at[i] = fitted
    n_cut = len(cut_at) if as_plan else sum(1 for q in out if q.truncated_to is not None)
    fitted_all = queries.with_replaced(cut_at) if isinstance(queries, QueryPlan) else out
    if tally is not None:
        tally.n_total += len(queries)
        tally.n_cut += n_cut
        tally.n_too_long += len(too_long)
        tally.too_long += too_long[: 3 - len(tally.too_long)]
        tally.stop = (limit, out_tokens, mode == "error")
        return fitted_all
    if too_long:
        raise too_long_stop("forecast prompt", too_long, len(queries), limit, out_tokens, can_truncate=mode == "error")
    if n_cut:
        print(
            f"prompt_overflow: truncate_text: the text of {n_cut} of {len(queries)} rows was cut to "
            f"fit the context length (counted in the report)"
        )
    return fitted_all


def estimate_tokens(backend: Backend, prompts: Iterable[str]) -> int:
    """Prompt tokens of ``prompts`` (read once, in order: a plan's prompts are made a slice at
    a time, never held as one list), by the backend's tokenizer where it has one."""
    it = iter(prompts)
    first = next(it, None)
    if first is None:
        return 0
    counter = getattr(backend, "count_tokens", None)
    n = counter(first) if callable(counter) else None
    if callable(counter) and n is not None:
        return int(n) + sum(int(counter(p)) for p in it)
    return sum(max(1, len(p) // 4) for p in itertools.chain([first], it))  # ~4 characters per token (no tokenizer here)


def print_plan(
    ctx: JobContext, task: str, unit: str, n_total: int, pending: Sequence[Query], output_tokens: int, multiplier: int = 1
) -> None:
    """Query count after dedupe and cache hits, and the cost estimate."""
    n_cached = n_total - len(pending)
    print(
        f"{task}: {n_total} {unit}; cached (identical key): {n_cached}; to query: {len(pending)}"
        + (f" x {multiplier} samples = {len(pending) * multiplier} generations" if multiplier > 1 else "")
    )
    if not pending:
        return
    prompt_tokens = estimate_tokens(ctx.backend, (q.prompt for q in pending)) * multiplier
    out_tokens = output_tokens * len(pending) * multiplier
    total = prompt_tokens + out_tokens
    price = ctx.study.runner.price_per_1k_tokens
    backend = ctx.study.backend.backend
    if price is None and backend in LOCAL_BACKENDS:
        price = 0.0
    from llm_jobs.jobs_plan import Estimate, record

    record(
        Estimate(
            task, len(pending) * multiplier, prompt_tokens, out_tokens, None if price is None else total / 1000 * float(price)
        )
    )
    if price is None:
        cost = "unknown (set price_per_1k_tokens)"
    else:
        cost = f"${total / 1000 * float(price):,.2f} at {float(price)} per 1k tokens"
        if backend in LOCAL_BACKENDS and float(price) == 0:
            cost += " (local model)"
    print(f"  estimate: {prompt_tokens:,} prompt + {out_tokens:,} output tokens = {total:,} tokens; cost {cost}")
