"""What every LLM job shares: arguments, rows, the batch plan, confirmation, the
query loop with its progress bar, and user-facing errors.

The loop is the crash-safety contract in practice: each answer is appended (fsynced)
as soon as it arrives, before the next one is awaited (a backend that answers a batch
in one pass, a local model's forward pass, returns the batch's answers together), and
the plan counts only keys with an answer in the raw file, so a killed job resumes where
it stopped and never pays twice. Only complete
answers are appended; a query without one goes to ``<task>.failures.jsonl`` and is asked
again next run. The prompt guards (template leaks, context length) run while planning,
before anything is paid for, and every way a job ends is one line (``guarded``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from lookahead.backends import Backend, get_backend
from lookahead.backends.base import BackendFatal, QueryFailure
from lookahead.cache import CacheError, Ident, RawStore, incomplete_reason, utc_now
from lookahead.config import Study, StudyConfigError, load_study
from lookahead.keys import sampling_fallback
from lookahead.masking import MaskedStream, install_log_filter, mask
from lookahead.rows import load_rows, subsample_rows

LARGE_STUDY_ROWS = 10_000
LOCAL_BACKENDS = ("transformers", "vllm")
QUERY_LOG_ENV = "LOOKAHEAD_QUERY_LOG"  # optional: one line per key sent to the model

EXIT_OK, EXIT_DECLINED, EXIT_USER_ERROR, EXIT_PARSE_RATE = 0, 1, 2, 3
EXIT_INCOMPLETE = 4  # some queries got no complete answer; rerun the same command to resume
EXIT_UNEXPECTED = 70
# This many failed queries in a row (no answer between them) mean the server is down or
# refusing: the job stops instead of paying the full retry bound for every query left.
STOP_AFTER_FAILURES_IN_A_ROW = 8
RESUME = "run the same command again to resume"


class JobStop(Exception):
    """A user-facing stop: message printed without a traceback, then exit ``code``."""

    def __init__(self, message: str, code: int = EXIT_USER_ERROR) -> None:
        super().__init__(message)
        self.code = code


def arg_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--study", help="study file (YAML var overrides); default: dbt_project.yml vars "
                   "or $LOOKAHEAD_STUDY")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (scripts, CI)")
    p.add_argument("--subsample", type=int, default=None, metavar="N",
                   help="query a seeded random subsample of N valid rows (overrides the study's "
                        "subsample_rows; dbt and the report follow the study file)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="subsample seed (default: the study's subsample_seed, 0)")
    p.add_argument("--allow-sampling", action="store_true",
                   help="permit the sampling fallback (>= 25 samples per query) when the backend "
                        "returns no logprobs")
    p.add_argument("--accept-low-parse-rate", action="store_true",
                   help="forecast: continue below 95%% parse rate (this run only; the study file "
                        "is not edited: `lookahead run --accept-low-parse-rate` passes the same "
                        "acceptance to dbt, which records it in the build identity and the report)")
    return p


@dataclass
class JobContext:
    """One job run's settings, rows and (lazily built) backend."""

    study: Study
    args: argparse.Namespace
    rows: pd.DataFrame
    n_rejected: int
    _backend: Backend | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = get_backend(self.study)
        return self._backend

    @property
    def use_chat_template(self) -> bool:
        return bool(self.study["use_chat_template"])

    @property
    def batch_size(self) -> int:
        return int(self.study["batch_size"])

    def for_backend(self, queries: Sequence["Query"]) -> list["Query"]:
        """The queries with the exact text the backend is sent (its chat template applied
        when the study asks): the backend, and so the model, is loaded only here, when
        something is left to query."""
        if not queries:
            return []
        if not sampling_fallback(self.study) and not getattr(self.backend, "supports_logprobs", True):
            raise JobStop(f"backend '{self.study['backend']}' returns no logprobs: set "
                          "logprobs_available: false (recall then uses the sampling fallback)")
        chat = self.use_chat_template
        return [replace(q, prompt=self.backend.render_prompt(q.prompt, chat)) for q in queries]

    def out_dir(self) -> Path:
        """Derived per-study files (parquet summaries): ``outputs_dir``, default outputs/<study_name>/."""
        return self.study.outputs_dir


def make_context(args: argparse.Namespace, backend: Backend | None = None) -> JobContext:
    """Load the study and the rows to query: the valid rows in the study's subsample.

    The rows come from lookahead.rows, the definition dbt staging uses too. The
    subsample is the study's subsample_rows/subsample_seed; --subsample/--seed override
    them for this run only, and a note says how to give dbt the same rows."""
    study = load_study(args.study)
    if args.seed is not None and args.subsample is None:
        raise JobStop("--seed needs --subsample N (or set subsample_rows in the study file)")
    study_sub = (study.get("subsample_rows"), int(study.get("subsample_seed") or 0))
    subsample = None
    if args.subsample is not None:
        subsample = (args.subsample, args.seed if args.seed is not None else study_sub[1])
    rows, rejects = load_rows(study, subsample)
    counts = rejects["reject_reason"].value_counts() if len(rejects) else pd.Series(dtype=int)
    detail = "; ".join(f"{n} {reason}" for reason, n in counts.items())
    if rows.empty:
        raise JobStop(f"no valid rows in {study['data_path']} ({len(rejects)} rejected"
                      + (f": {detail}" if detail else "") + "); see seeds/reject_reasons.csv")
    print(f"study '{study.get('study_name')}': {len(rows)} rows to query, {len(rejects)} rejected"
          + (f" ({detail})" if detail else ""))
    size, seed = subsample or study_sub
    if size is not None:
        print(f"subsample: {len(rows)} rows (subsample_rows {size}, seed {seed})")
        if subsample is not None and subsample != study_sub:
            print(f"note: dbt build and the report follow the study file: put 'subsample_rows: {size}' "
                  f"and 'subsample_seed: {seed}' in it so they analyse these same rows")
    elif len(rows) > LARGE_STUDY_ROWS:
        print(f"note: {len(rows)} rows is a large study; consider a seeded random subsample first "
              f"(subsample_rows: 2000 and subsample_seed: 0 in the study file).")
        if not args.yes and sys.stdin.isatty():
            answer = input("subsample size (blank = all rows): ").strip()
            if answer:
                if not answer.isdigit():
                    raise JobStop(f"subsample size '{answer}' is not a number")
                rows = subsample_rows(rows, int(answer), study_sub[1])
                print(f"subsample: {len(rows)} rows (seed {study_sub[1]}); put 'subsample_rows: "
                      f"{answer}' in the study file so dbt build analyses these same rows")
    preflight(study, rows)
    return JobContext(study, args, rows, len(rejects), backend)


def preflight(study: Study, rows: pd.DataFrame) -> None:
    """Refuse, before anything is asked or paid for, a study whose rows cannot reach a
    verdict or would get one the answers cannot change: too few rows for gate_panel
    (min_panel_rows), no pre-cutoff row (the verdict would be Underpowered: nothing to
    test), fewer than two pre-cutoff clusters (beta_3's clustered test cannot run).
    The prompts' placeholders and lengths are checked next, by each job's plan, also
    before its confirmation."""
    cutoff = pd.Timestamp(str(study["training_cutoff"]))
    target = pd.to_datetime(rows["target_date"])
    pre = rows[target <= cutoff]
    n_pre, n_post = len(pre), len(rows) - len(pre)
    counts = f"{len(rows)} valid rows ({n_pre} pre-cutoff, {n_post} post-cutoff, training_cutoff {study['training_cutoff']})"
    print(f"preflight: {counts}")
    fix = "nothing was queried; add rows, or check training_cutoff and the date columns"
    if len(rows) < int(study["min_panel_rows"]):
        raise JobStop(f"{counts}: fewer than min_panel_rows ({study['min_panel_rows']}), so gate_panel "
                      f"would stop the build and no verdict could be reached; {fix}")
    if n_pre == 0:
        raise JobStop(f"{counts}: no pre-cutoff row, so the verdict could only be Underpowered "
                      f"(the detection test cannot run); {fix}")
    cluster = str(study["cluster"])
    column = {"entity": "entity_id", "date": "target_date"}.get(cluster)
    if column in pre.columns and pre[column].nunique() < 2:
        raise JobStop(f"{counts}: the pre-cutoff rows form {pre[column].nunique()} cluster(s) (cluster: "
                      f"{cluster}), so beta_3's clustered test cannot run and the verdict could only be "
                      f"Underpowered; {fix}")


def confirm(question: str, yes: bool) -> None:
    """Ask before paying for queries; --yes answers for scripts and CI."""
    if yes:
        print(f"{question} yes (--yes)")
        return
    if not sys.stdin.isatty():
        raise JobStop("confirmation needed but stdin is not a terminal: rerun with --yes", EXIT_DECLINED)
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise JobStop("cancelled; nothing was queried", EXIT_DECLINED)


@dataclass
class Query:
    """One pending query: its key, the prompt and the identifying fields.

    ``text`` is the prompt as rendered from the study's template (what the key hashes);
    ``prompt`` is the exact text sent: the same until JobContext.for_backend applies the
    model's chat template, and a cut text when prompt_overflow: truncate_text had to fit
    the context (``params`` then records how much it kept, beside the key's params).
    ``row`` is the input row of a forecast or Min-K% query (needed to cut its text)."""

    key: str
    prompt: str
    row_id: str | None = None
    entity_id: str | None = None
    target_date: str | None = None
    text: str = ""
    row: dict[str, Any] | None = None
    truncated_to: int | None = None

    def __post_init__(self) -> None:
        self.text = self.text or self.prompt


def open_store(ctx: JobContext, task: str) -> RawStore:
    """A job's cache file, readable even where it cannot be written (a complete cache in
    a read-only folder is reused; RawStore.require_writable stops a job with work left)."""
    return RawStore(ctx.study.raw_file(task), read_only_ok=True)


def query_ident(ctx: JobContext, task: str, q: Query) -> Ident:
    """The fields a cached line must share with query ``q`` (lookahead.cache.ident_of)."""
    return (task, str(ctx.study["model_id"]), q.row_id, q.entity_id, q.target_date)


def not_cached(ctx: JobContext, store: RawStore, task: str, queries: Sequence[Query]) -> list[Query]:
    """The queries without an answer in the cache: no line under their key, or only lines
    whose fields disagree with it (the build lists those in raw_line_rejects)."""
    return [q for q in queries if not store.has_answer(q.key, query_ident(ctx, task, q))]


def cached_records(ctx: JobContext, store: RawStore, task: str,
                   queries: Sequence[Query]) -> dict[str, dict[str, Any]]:
    """key -> the answer line of each query (only lines that agree with their key)."""
    return store.load({q.key: query_ident(ctx, task, q) for q in queries})


# ----------------------------------------------------------------------------- prompt guards


def prompt_token_limit(ctx: JobContext, output_tokens: int) -> tuple[int | None, Callable[[str], int] | None]:
    """(most prompt tokens a query may have, token counter), or (None, None) when the
    context length is unknown (then nothing can be checked and the job says so).

    The context length is the setting context_length, else what the backend knows
    (transformers: the model config; vLLM: max_model_len). The answer needs room too:
    at least one token, forecast_max_tokens for forecasts."""
    context = ctx.study["context_length"]
    if context is None:
        context = ctx.backend.context_length()
    if context is None:
        if "context_length" not in ctx.notes:
            ctx.notes.append("context_length")
            print("note: prompt lengths not checked: the model's context length is unknown here "
                  "(set context_length in the study)")
        return None, None
    counter = getattr(ctx.backend, "count_tokens", None)
    if not callable(counter) or counter("x") is None:
        raise StudyConfigError(
            "setting 'tokenizer_path': prompts cannot be counted against the context length "
            f"({context} tokens) without the model's tokenizer; set tokenizer_path")
    return context - max(1, int(output_tokens)), counter  # type: ignore[return-value]


def too_long_stop(task: str, too_long: Sequence[tuple[str, int]], n_total: int, limit: int,
                  output_tokens: int, can_truncate: bool) -> JobStop:
    """One line naming the prompts that do not fit, before anything is queried."""
    shown = ", ".join(f"{ident} ({n} tokens)" for ident, n in too_long[:3])
    fix = ("shorten the text, or set prompt_overflow: truncate_text (the text is cut to fit and "
           "the report counts the rows)" if can_truncate else "shorten the template")
    return JobStop(
        f"{task}: {len(too_long)} of {n_total} prompts exceed the model's context length "
        f"({limit + max(1, output_tokens)} tokens, {max(1, output_tokens)} kept for the answer), "
        f"e.g. {shown}; nothing was queried. Fix: {fix}.")


def forecast_output_tokens(ctx: JobContext) -> int:
    """The forecast's answer budget; Min-K% scores the same prompts with the same budget,
    so both tasks cut a too-long text at the same place."""
    return int(ctx.study["forecast_max_tokens"])


def row_queries(ctx: JobContext, task: str, params: dict[str, Any]) -> list["Query"]:
    """One query per row over its forecast prompt (forecast and Min-K% ask the same prompt),
    keyed by lookahead.keys; the template guard runs first (no outcome, no target date)."""
    from lookahead.keys import forecast_prompt_column, row_keys
    from lookahead.prompts import check_forecast_template

    template = str(ctx.study["forecast_prompt"])
    check_forecast_template(template, ctx.study["column_map"], ctx.study["forecast_prompt_allowed_columns"])
    prompts = forecast_prompt_column(ctx.study, ctx.rows)  # every row at once: a study may have millions
    keys = row_keys(ctx.study, task, ctx.rows, params, prompts)
    return [Query(key, prompt, row_id=str(row["row_id"]), row=row)
            for key, prompt, row in zip(keys.to_pylist(), prompts.to_pylist(), ctx.rows.to_dict("records"))]


def fit_forecast_prompts(ctx: JobContext, queries: Sequence["Query"]) -> list["Query"]:
    """Forecast or Min-K% queries about to be sent, checked against the context length.

    Guards run here, before any query: each prompt (chat template applied) must fit the
    context length; with prompt_overflow: truncate_text the text is cut (longest prefix
    that fits) and the kept length goes into the line's params, beside the key's params
    (the key is the uncut query's: the cut is fixed by the model, context_length and
    prompt_overflow, which the key covers). Both tasks cut a text at the same place."""
    from lookahead.prompts import render_forecast

    if not queries:  # everything cached: no context length to read, no model config loaded
        return []
    template = str(ctx.study["forecast_prompt"])
    mode = ctx.study["prompt_overflow"]
    out_tokens = forecast_output_tokens(ctx)
    limit, count = prompt_token_limit(ctx, out_tokens)
    text_col = str(ctx.study["column_map"]["text"])
    if limit is None or count is None:
        return list(queries)

    def render(row: dict[str, Any]) -> str:
        return ctx.backend.render_prompt(render_forecast(template, row), ctx.use_chat_template)

    out: list[Query] = []
    too_long: list[tuple[str, int]] = []
    for q in queries:
        n, kept, prompt = count(q.prompt), None, q.prompt
        if n > limit and mode == "truncate_text" and q.row is not None:
            text = str(q.row.get("text") or "")

            def cut(k: int) -> dict[str, Any]:
                return {**q.row, "text": text[:k], text_col: text[:k]}

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
        out.append(q if kept is None else replace(q, prompt=prompt, truncated_to=kept))
    if too_long:
        raise too_long_stop("forecast prompt", too_long, len(out), limit, out_tokens,
                            can_truncate=mode == "error")
    n_cut = sum(1 for q in out if q.truncated_to is not None)
    if n_cut:
        print(f"prompt_overflow: truncate_text: the text of {n_cut} of {len(out)} rows was cut to "
              f"fit the context length (counted in the report)")
    return out


def estimate_tokens(backend: Backend, prompts: Sequence[str]) -> int:
    counter = getattr(backend, "count_tokens", None)
    if callable(counter) and prompts and counter(prompts[0]) is not None:
        return sum(int(counter(p)) for p in prompts)
    return sum(max(1, len(p) // 4) for p in prompts)  # ~4 characters per token (no tokenizer here)


def print_plan(ctx: JobContext, task: str, unit: str, n_total: int, pending: Sequence[Query],
               output_tokens: int, multiplier: int = 1) -> None:
    """Query count after dedupe and cache hits, and the cost estimate."""
    n_cached = n_total - len(pending)
    print(f"{task}: {n_total} {unit}; cached (identical key): {n_cached}; to query: {len(pending)}"
          + (f" x {multiplier} samples = {len(pending) * multiplier} generations" if multiplier > 1 else ""))
    if not pending:
        return
    prompt_tokens = estimate_tokens(ctx.backend, [q.prompt for q in pending]) * multiplier
    out_tokens = output_tokens * len(pending) * multiplier
    total = prompt_tokens + out_tokens
    price = ctx.study.get("price_per_1k_tokens")
    backend = ctx.study["backend"]
    if price is None and backend in LOCAL_BACKENDS:
        price = 0.0
    if price is None:
        cost = "unknown (set price_per_1k_tokens)"
    else:
        cost = f"${total / 1000 * float(price):,.2f} at {float(price)} per 1k tokens"
        if backend in LOCAL_BACKENDS and float(price) == 0:
            cost += " (local model)"
    print(f"  estimate: {prompt_tokens:,} prompt + {out_tokens:,} output tokens = {total:,} tokens; cost {cost}")


def progress_bar(total: int, desc: str) -> Any:
    """tqdm bar with count, rate and ETA on stderr."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="q", file=sys.stderr, dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]")


@dataclass
class QueryTally:
    """What one job's query loop achieved: answers written and queries without one."""

    task: str
    n_pending: int
    written: int = 0
    failures: Counter = field(default_factory=Counter)  # reason -> queries

    @property
    def n_failed(self) -> int:
        return sum(self.failures.values())

    def reasons(self) -> str:
        return "; ".join(f"{n} x {r}" for r, n in self.failures.most_common(3))


def failure_record(task: str, q: Query, rec: dict[str, Any], reason: str, attempts: int) -> dict[str, Any]:
    """One line of ``<task>.failures.jsonl``: the key, what it was, why there is no answer."""
    return {
        "key": q.key, "task": task, "model_id": rec.get("model_id"), "row_id": q.row_id,
        "entity_id": q.entity_id, "target_date": q.target_date, "params": rec.get("params"),
        "reason": mask(reason), "attempts": int(attempts), "failed_at": utc_now(),
    }


Answer = Callable[[Backend, list[Query]], list[dict[str, Any] | QueryFailure]]
"""A job's query: backend and a batch -> one answer (or QueryFailure) per query. A
module-level function (params bound with functools.partial), so that the Ray runner can
ship it to its workers."""


def query_all(ctx: JobContext, store: RawStore, pending: Sequence[Query], task: str, answer: Answer,
              params: dict[str, Any]) -> QueryTally:
    """Ask every pending query on the study's runner (setting runner): in this process
    (run_queries), or on Ray Data workers that each append to their own cache shard
    (llm_jobs.ray_runner). Both write the same lines under the same guarantees."""
    def base(q: Query) -> dict[str, Any]:
        return record_skeleton(ctx, task, q, params)

    if ctx.study["runner"] == "ray":
        from llm_jobs.ray_runner import run_queries_ray

        return run_queries_ray(ctx, store, pending, task, answer, base)
    return run_queries(store, pending, ctx.batch_size, task, lambda batch: answer(ctx.backend, batch),
                       base, ctx.backend)


def log_queries(batch: Sequence[Query], log_path: str | None = None) -> None:
    """One line per key about to be sent, when LOOKAHEAD_QUERY_LOG (or ``log_path``)
    names a file (tests prove with it that no written key is asked again)."""
    log_path = log_path or os.environ.get(QUERY_LOG_ENV)
    if log_path:
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write("".join(f"{q.key}\n" for q in batch))
            fh.flush()


def settle(store: RawStore, desc: str, q: Query, rec: dict[str, Any], res: dict[str, Any] | QueryFailure,
           started: str, finished: str) -> str | None:
    """Append a complete answer to ``store``, or record why there is none; return that
    reason (None when the answer was written)."""
    attempts = 1
    if isinstance(res, QueryFailure):
        reason, attempts = res.reason, res.attempts
    else:
        rec.update(res)
        rec["started_at"], rec["finished_at"] = started, finished
        reason = incomplete_reason(rec)
    if reason:
        store.record_failure(failure_record(desc, q, rec, reason, attempts))
        return mask(reason)
    store.append(rec)
    return None


def answer_each(answer: Callable[[list[Query]], list[dict[str, Any] | QueryFailure]],
                queries: Sequence[Query], batch_size: int, streams: int,
                on_answer: Callable[[Query, dict[str, Any] | QueryFailure, str, str], bool],
                log_path: str | None = None) -> None:
    """Ask every query and hand each answer to ``on_answer`` (which writes it) as soon as
    it arrives, before the next one is awaited; ``on_answer`` returning False stops asking
    (answers already in flight are still handed over: they are paid for).

    streams = 0: batches of ``batch_size`` (a local model answers a batch in one pass,
    so its answers arrive together). streams = n > 0 (a remote server, n concurrent
    requests): one query per request, at most n in flight, so a kill loses at most the
    requests in flight, not a batch of answers already received."""
    if streams <= 0:
        for a in range(0, len(queries), batch_size):
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
            q = next(todo, None)
            if q is not None:
                log_queries([q], log_path)
                in_flight[pool.submit(answer, [q])] = (q, utc_now())

        for _ in range(streams):
            submit()
        go_on = True
        while in_flight:
            done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
            for fut in done:
                q, started = in_flight.pop(fut)
                res = fut.result()[0]  # a BackendFatal stops the job here
                go_on = on_answer(q, res, started, utc_now()) and go_on
                if go_on:
                    submit()


def answer_streams(backend: Backend | None) -> int:
    """How many requests a backend keeps in flight (its setting concurrency), 0 for a
    backend that answers a batch in one pass."""
    return int(getattr(backend, "concurrency", 0) or 0)


def run_queries(
    store: RawStore,
    pending: Sequence[Query],
    batch_size: int,
    desc: str,
    answer: Callable[[list[Query]], list[dict[str, Any] | QueryFailure]],
    base_record: Callable[[Query], dict[str, Any]],
    backend: Backend | None = None,
) -> QueryTally:
    """Ask every pending query (:func:`answer_each`); append each complete answer, record
    each failure, each as it arrives.

    Only complete answers reach the cache (lookahead.cache.incomplete_reason); a query
    that got none within the backend's retry bound goes to ``<task>.failures.jsonl``
    and stays pending, so the next run asks it again. When the last
    STOP_AFTER_FAILURES_IN_A_ROW queries all failed the server is taken to be down and
    the loop stops (JobStop) instead of paying the retry bound for every query left."""
    tally = QueryTally(desc, len(pending))
    in_a_row = 0
    retries_before = int(getattr(backend, "retries_done", 0) or 0)
    with progress_bar(len(pending), desc) as bar:

        def on_answer(q: Query, res: dict[str, Any] | QueryFailure, started: str, finished: str) -> bool:
            nonlocal in_a_row
            reason = settle(store, desc, q, base_record(q), res, started, finished)
            if reason:
                tally.failures[reason] += 1
                in_a_row += 1
            else:
                tally.written += 1
                in_a_row = 0
            bar.update(1)
            done = tally.written + tally.n_failed
            return not (in_a_row >= min(STOP_AFTER_FAILURES_IN_A_ROW, len(pending)) and done < len(pending))

        answer_each(answer, pending, batch_size, answer_streams(backend), on_answer)
        if in_a_row >= min(STOP_AFTER_FAILURES_IN_A_ROW, len(pending)) and tally.written + tally.n_failed < len(pending):
            bar.close()
            raise too_many_failures(desc, in_a_row, tally, store)
    retries = int(getattr(backend, "retries_done", 0) or 0) - retries_before
    if retries:
        print(f"{desc}: {retries} retries (rate limits, server errors, timeouts, malformed or "
              "incomplete replies); only complete answers were saved")
    return tally


def too_many_failures(desc: str, in_a_row: int, tally: QueryTally, store: RawStore) -> JobStop:
    return JobStop(
        f"{desc}: the last {in_a_row} queries all failed ({tally.reasons()}); the server "
        f"looks down or is refusing. {tally.written} of {tally.n_pending} answered and saved; "
        f"failures recorded in {store.failures_path}; {RESUME}.", EXIT_INCOMPLETE)


def require_complete(tally: QueryTally, store: RawStore) -> None:
    """Stop the job (non-zero exit, one line) when some queries have no answer yet."""
    if tally.n_failed:
        raise JobStop(
            f"{tally.task}: {tally.n_failed} of {tally.n_pending} queries got no complete answer "
            f"within the retry bound ({tally.reasons()}); {tally.written} answered and saved; "
            f"failures recorded in {store.failures_path}; {RESUME}.", EXIT_INCOMPLETE)


def record_skeleton(ctx: JobContext, task: str, q: Query, params: dict[str, Any]) -> dict[str, Any]:
    """A raw line with every contract field present (docs/CONTRACTS.md)."""
    return {
        "key": q.key, "task": task, "model_id": ctx.study["model_id"],
        "backend": getattr(ctx.backend, "name", ctx.study["backend"]),
        "row_id": q.row_id, "entity_id": q.entity_id, "target_date": q.target_date,
        "prompt": q.prompt, "query_text": q.text,
        "params": params if q.truncated_to is None else {**params, "text_truncated_to_chars": q.truncated_to},
        "response_text": None, "top_logprobs": None,
        "prompt_logprobs": None, "samples": None, "approximated": False,
        "first_token_prob": None, "stated_confidence": None,
        "started_at": None, "finished_at": None,
    }


def logprob_dicts(items: Sequence[Any], vocab_moments: bool = False) -> list[dict[str, Any]]:
    """TokenLogprob objects -> the contract's {token_id, token, logprob} dicts (with
    vocab_mean and vocab_var when asked: lookahead.measures)."""
    if vocab_moments:
        return [{"token_id": t.token_id, "token": t.token, "logprob": t.logprob,
                 "vocab_mean": t.vocab_mean, "vocab_var": t.vocab_var} for t in items]
    return [{"token_id": t.token_id, "token": t.token, "logprob": t.logprob} for t in items]


def run_main(job: Callable[[JobContext], int], description: str, argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run one job, turn user errors into one clear line + exit code."""
    args = arg_parser(description).parse_args(argv)
    return guarded(lambda: job(make_context(args)))


@contextlib.contextmanager
def masked_output() -> Iterator[None]:
    """stdout and stderr pass through lookahead.masking.mask while a job runs."""
    install_log_filter()
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, MaskedStream):
        sys.stdout = MaskedStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, MaskedStream):
        sys.stderr = MaskedStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def describe_os_error(exc: OSError) -> str:
    """A file-system failure as one line naming the file and what to do."""
    where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
    what = exc.strerror or type(exc).__name__
    hint = {28: "free some space", 27: "the file-size limit is reached (ulimit -f)",
            13: "make the folder writable or point the setting at one that is",
            30: "the file system is read-only: point raw_dir/outputs_dir at a writable folder"}
    return f"cannot use{where}: {what}; {hint.get(exc.errno or 0, 'check the path')}"


def _one_line(fn: Callable[[], int], saved: str) -> int:
    """``fn``'s exit code; every way it can fail prints one line (ending in ``saved`` where
    answers may have been written) and returns its exit code, never a traceback.
    LOOKAHEAD_DEBUG=1 re-raises unexpected errors for developers."""
    try:
        return fn()
    except JobStop as exc:
        print(f"stopped: {mask(exc)}", file=sys.stderr)
        return exc.code
    except BackendFatal as exc:
        print(f"stopped: {mask(exc)}; finished answers are saved; {RESUME}.", file=sys.stderr)
        return EXIT_INCOMPLETE
    except (StudyConfigError, CacheError, FileNotFoundError) as exc:
        print(f"error: {mask(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as exc:
        print(f"error: {mask(describe_os_error(exc))}{saved}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"interrupted: finished answers are saved; {RESUME}", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if os.environ.get("LOOKAHEAD_DEBUG"):
            raise
        print(f"error: unexpected {type(exc).__name__}: {mask(exc)}{saved} "
              "(LOOKAHEAD_DEBUG=1 shows the traceback)", file=sys.stderr)
        return EXIT_UNEXPECTED


def guarded_line(fn: Callable[[], int]) -> int:
    """Run ``fn`` with output masked, failures in one line (``_one_line``).

    For commands that print their own progress (the ``lookahead`` wrapper): unlike
    ``guarded`` it adds no 'done in' line."""
    with masked_output():
        return _one_line(fn, "")


def guarded(fn: Callable[[], int]) -> int:
    """Run a job with output masked, failures in one line (``_one_line``), then 'done in'.

    Answers already written stay in the cache whatever happens, so each failure message
    ends with how to resume."""
    t0 = time.time()
    with masked_output():
        code = _one_line(fn, f"; finished answers are saved; {RESUME}.")
        if code == 0:
            print(f"done in {time.time() - t0:.1f} s")
        return code
