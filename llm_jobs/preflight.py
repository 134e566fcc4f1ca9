"""`lookahead check`'s preflight: every check the LLM jobs make before their first query,
and nothing else. Run by `lookahead check` as ``python -m llm_jobs.preflight --settings FILE``
(a process of its own: the package never imports the jobs, and the tokenizer and the rows'
scan are freed when it ends).

Why the jobs' own code rather than a list of its own: a check that `lookahead run` made
and `lookahead check` did not (an unknown `{sector}` placeholder, a prompt longer than the
context, no pre-cutoff row, a single cluster) passed `check` and stopped the run, so the
preflight calls what the run calls before querying (llm_jobs.context's scan of the rows and
its preflight, each job's plan, llm_jobs.planning.fit_forecast_prompts, the recall label
check on the model's exact tokenizer): the two cannot drift apart.

What it loads: the model's tokenizer and config (transformers: no weights; an API
backend: the tokenizer named by tokenizer_path); it sends nothing and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace

import pandas as pd
import pyarrow as pa

from llm_jobs import forecast, mink, recall, reference
from llm_jobs.cli import arg_parser
from llm_jobs.context import JobContext, preflight, scan_context_rows
from llm_jobs.planning import FitTally, fit_forecast_prompts, prompt_token_limit, too_long_stop
from lookahead.errors import StudyConfigError
from lookahead.guard import EXIT_OK, guarded
from lookahead.keys import task_params
from lookahead.rows import PAIR_COLUMNS


def check(args: argparse.Namespace) -> int:
    """The run's pre-query checks (llm_jobs.context's preflight on the rows' counts, then
    each job's plan), one summary line when all pass.

    The rows are checked a chunk at a time (lookahead.rows.RowScan.chunks): a job holds
    every row and its queries, which `lookahead check` of a ten-million-row file cannot
    afford, and a row's checks need no other row. The recall pairs (one per (entity_id,
    target_date), the first row of each: RowScan.first_of_pairs) are gathered over the
    chunks as Arrow columns and checked after the rows, RECALL_SLICE_PAIRS at a time
    (:func:`check_recall`)."""
    study, scan, _ = scan_context_rows(args)
    preflight(study, scan.facts(study.protocol.training_cutoff))
    ctx = JobContext(study, args, pd.DataFrame(), scan.n_rejected)
    fit, n_queries = FitTally(), 0
    pairs: list[pa.Table] = []
    firsts, at = scan.first_of_pairs(), 0
    for rows, _ in scan.chunks():
        part = replace(ctx, rows=rows, _row_index=None)  # the backend, once loaded, is shared
        mink.plan(part, task_params(study, mink.TASK))
        reference.plan_reference(part)
        queries, _ = forecast.plan(part)  # placeholders and the template guards
        fit_forecast_prompts(part, part.for_backend(queries), fit)  # every prompt fits the context
        n_queries += len(queries)
        ctx._backend = part._backend
        first = rows.loc[firsts[at : at + len(rows)], list(PAIR_COLUMNS)]  # each pair's first row
        pairs.append(pa.Table.from_pandas(first, preserve_index=False))
        at += len(rows)
        del part, queries, first
    if at != len(firsts):
        raise StudyConfigError(f"setting 'data_path': '{study.input.data_path}' changed while it was read; run again")
    fit.finish()
    n_pairs = check_recall(ctx, pa.concat_tables(pairs))
    print(
        f"preflight passed: {n_queries} forecast and Min-K% prompts and {n_pairs} recall prompts "
        "fit the model's context, recall labels checked on its tokenizer; nothing was queried"
    )
    return EXIT_OK


#: Recall pairs planned at a time by `check_recall`.
RECALL_SLICE_PAIRS = 65_536


def check_recall(ctx: JobContext, pairs: pa.Table) -> int:
    """The recall job's checks before its first query, on every pair (one row each, the
    columns PAIR_COLUMNS): its plan (keys and prompts), the labels on the model's tokenizer
    (from the first pair's prompt, as the job does), and every prompt against the context
    length, with one stop naming the first too long and their count. How many pairs.

    Why a slice at a time: the job's plan is a Query object per pair, and 5,000,000 pairs
    (2,000 entities by 2,500 dates) planned at once, twice, and sent through the chat
    template peaked at 14,123 MiB; a slice's queries are let go before the next is made."""
    params = task_params(ctx.study, recall.TASK)

    def part(a: int, n: int) -> JobContext:
        return replace(ctx, rows=pairs.slice(a, n).to_pandas(types_mapper=pd.ArrowDtype), _row_index=None)

    first = part(0, RECALL_SLICE_PAIRS)
    asks = recall.plan(first, params, None)
    labels = recall.resolve_labels(first, first.for_backend(asks[:1])[0].prompt)  # the exact tokenizer
    ctx._backend = first._backend
    del first, asks
    limit, _ = prompt_token_limit(ctx, 1)
    shown: list[tuple[str, int]] = []
    n_over = 0
    for a in range(0, pairs.num_rows, RECALL_SLICE_PAIRS):
        piece = part(a, RECALL_SLICE_PAIRS)
        queries = recall.plan(piece, params, labels)
        if limit is not None:  # else nothing is counted (the job's own check reads no prompt then)
            _, over = recall.recall_too_long(piece, piece.for_backend(queries))
            n_over += len(over)
            shown += over[: 3 - len(shown)]
        del piece, queries
    if n_over and limit is not None:
        raise too_long_stop("recall prompt", shown, pairs.num_rows, limit, 1, can_truncate=False, n_too_long=n_over)
    return pairs.num_rows


def main(argv: Sequence[str] | None = None) -> int:
    args = arg_parser("Every check the LLM jobs make before their first query; queries nothing.").parse_args(argv)
    args.yes = True  # nothing is asked: a large study's subsample prompt is not a check
    return guarded(lambda: check(args))


if __name__ == "__main__":
    sys.exit(main())
