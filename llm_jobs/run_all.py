"""The LLM jobs in order (forecast, recall, Min-K%, and the reference model's prompt
log-probs when the study computes the reference-model LAP), the target model loaded once.

Run: ``python -m llm_jobs.run_all --study FILE --yes``

Each job prints its own plan and asks its own confirmation (unless --yes). A forecast
parse rate below 95% stops the run before recall, as the protocol asks for a decision.
"""

from __future__ import annotations

import sys
from typing import Sequence

from llm_jobs import forecast, mink, recall, reference
from llm_jobs.cli import arg_parser
from llm_jobs.context import JobContext, make_context
from lookahead.guard import EXIT_OK, guarded
from lookahead.keys import task_params

JOBS = (("forecast", forecast.run), ("recall", recall.run), ("mink", mink.run), ("reference", reference.run))


def run(ctx: JobContext) -> int:
    # every task's plan first: the template guards (forecast prompt without the outcome,
    # recall query with entity and date and no text) stop the run before anything is paid
    forecast.plan(ctx)
    recall.plan(ctx, task_params(ctx.study, recall.TASK), None)
    mink.plan(ctx, task_params(ctx.study, mink.TASK))
    reference.plan_reference(ctx)
    for name, job in JOBS:
        print(f"== {name} ==")
        code = job(ctx)
        if code != EXIT_OK:
            return code
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = arg_parser("Run the forecast, recall, Min-K% (and reference-model) jobs for one study.").parse_args(argv)
    return guarded(lambda: run(make_context(args)))


if __name__ == "__main__":
    sys.exit(main())
