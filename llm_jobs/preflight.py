"""`lookahead check`'s preflight: every check the LLM jobs make before their first query,
and nothing else. Run: ``python -m llm_jobs.preflight --study FILE``

Why the jobs' own code rather than a list of its own: a check that `lookahead run` made
and `lookahead check` did not (an unknown `{sector}` placeholder, a prompt longer than the
context, no pre-cutoff row, a single cluster) passed `check` and stopped the run, so the
preflight calls what the run calls before querying (llm_jobs.context.make_context and its
preflight, each job's plan, llm_jobs.planning.fit_forecast_prompts, the recall label
check on the model's exact tokenizer): the two cannot drift apart.

What it loads: the model's tokenizer and config (transformers: no weights; an API
backend: the tokenizer named by tokenizer_path); it sends nothing and writes nothing.
"""

from __future__ import annotations

import sys
from typing import Sequence

from llm_jobs import forecast, mink, recall, reference
from llm_jobs.cli import arg_parser
from llm_jobs.context import JobContext, make_context
from llm_jobs.planning import fit_forecast_prompts
from lookahead.guard import EXIT_OK, guarded
from lookahead.keys import task_params


def check(ctx: JobContext) -> int:
    """The run's pre-query checks on a loaded context (rows, pre-cutoff rows and clusters
    were checked by make_context); one summary line when all pass."""
    study = ctx.study
    # Min-K%'s plan first and let go: a million rows' queries of one task at a time, not two
    mink.plan(ctx, task_params(study, mink.TASK))
    reference.plan_reference(ctx)
    queries, _ = forecast.plan(ctx)  # placeholders and the template guards
    pairs = recall.plan(ctx, task_params(study, recall.TASK), None)
    fit_forecast_prompts(ctx, ctx.for_backend(queries))  # every prompt fits the context
    labels = recall.resolve_labels(ctx, ctx.for_backend(pairs[:1])[0].prompt)  # the exact tokenizer
    recall.check_recall_lengths(ctx, ctx.for_backend(recall.plan(ctx, task_params(study, recall.TASK), labels)))
    print(f"preflight passed: {len(queries)} forecast and Min-K% prompts and {len(pairs)} recall prompts "
          "fit the model's context, recall labels checked on its tokenizer; nothing was queried")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = arg_parser("Every check the LLM jobs make before their first query; queries nothing.").parse_args(argv)
    args.yes = True  # nothing is asked: a large study's subsample prompt is not a check
    return guarded(lambda: check(make_context(args)))


if __name__ == "__main__":
    sys.exit(main())
