"""`lookahead check`'s preflight: every check the LLM jobs make before their first query,
and nothing else. Run: ``python -m llm_jobs.preflight --study FILE``

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

import sys
from dataclasses import replace
from typing import Sequence

import pandas as pd

from llm_jobs import forecast, mink, recall, reference
from llm_jobs.cli import arg_parser
from llm_jobs.context import JobContext, preflight, scan_context_rows
from llm_jobs.planning import FitTally, fit_forecast_prompts
from lookahead.guard import EXIT_OK, guarded
from lookahead.keys import task_params
from lookahead.rows import PAIR_COLUMNS, PAIR_KEY, unique_pairs


def check(args) -> int:
    """The run's pre-query checks (llm_jobs.context's preflight on the rows' counts, then
    each job's plan), one summary line when all pass.

    The rows are checked a chunk at a time (lookahead.rows.RowScan.chunks): a job holds
    every row and its queries, which `lookahead check` of a ten-million-row file cannot
    afford, and a row's checks need no other row. The recall pairs (one per (entity_id,
    target_date), the first row of each) are gathered over the chunks and checked at once."""
    study, scan, _ = scan_context_rows(args)
    preflight(study, scan.facts(study.protocol.training_cutoff))
    ctx = JobContext(study, args, pd.DataFrame(), scan.n_rejected)
    fit, n_queries = FitTally(), 0
    pairs: list[pd.DataFrame] = []
    seen: set[tuple[str, str]] = set()
    for rows, _ in scan.chunks():
        part = replace(ctx, rows=rows, _row_index=None)  # the backend, once loaded, is shared
        mink.plan(part, task_params(study, mink.TASK))
        reference.plan_reference(part)
        queries, _ = forecast.plan(part)  # placeholders and the template guards
        fit_forecast_prompts(part, part.for_backend(queries), fit)  # every prompt fits the context
        n_queries += len(queries)
        ctx._backend = part._backend
        first = unique_pairs(rows)  # a pair's first row in this chunk; kept if no earlier chunk had it
        keys = list(zip(first[PAIR_KEY[0]], first[PAIR_KEY[1]]))
        pairs.append(first[[k not in seen for k in keys]])
        seen.update(keys)
        del part, queries
    fit.finish()
    whole = replace(ctx, rows=pd.concat(pairs, ignore_index=True)[list(PAIR_COLUMNS)])
    asks = recall.plan(whole, task_params(study, recall.TASK), None)
    labels = recall.resolve_labels(whole, whole.for_backend(asks[:1])[0].prompt)  # the exact tokenizer
    recall.check_recall_lengths(whole, whole.for_backend(recall.plan(whole, task_params(study, recall.TASK), labels)))
    print(f"preflight passed: {n_queries} forecast and Min-K% prompts and {len(asks)} recall prompts "
          "fit the model's context, recall labels checked on its tokenizer; nothing was queried")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = arg_parser("Every check the LLM jobs make before their first query; queries nothing.").parse_args(argv)
    args.yes = True  # nothing is asked: a large study's subsample prompt is not a check
    return guarded(lambda: check(args))


if __name__ == "__main__":
    sys.exit(main())
