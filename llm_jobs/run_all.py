"""The LLM jobs in order (forecast and Min-K% from one pass where the backend shares it,
then forecast, recall, Min-K%, and the reference model's prompt log-probs when the study
computes the reference-model LAP), the target model loaded once.

Run: ``python -m llm_jobs.run_all --study FILE --yes``

Every job is planned first and the whole run's requests, tokens and price are printed
as one table and asked for once (llm_jobs.run_plan; --max-cost refuses a run above a
limit); then each job prints its own plan and runs. A forecast
parse rate below 95% stops the run before recall, as the protocol asks for a decision.
"""

from __future__ import annotations

import functools
import sys
from typing import Sequence

from llm_jobs import forecast, fused, mink, recall, reference, run_plan
from llm_jobs.cli import arg_parser
from llm_jobs.context import JobContext, make_context
from llm_jobs.planning import confirm
from lookahead.guard import EXIT_OK, guarded
from lookahead.keys import task_params

#: forecast+mink first: one pass answers and scores each row that misses both lines
#: (llm_jobs.fused); the forecast and Min-K% jobs then ask what is left and summarise.
JOBS = (("forecast+mink", fused.run), ("forecast", forecast.run), ("recall", recall.run), ("mink", mink.run),
        ("reference", reference.run))


def run(ctx: JobContext) -> int:
    # every task's plan first: the template guards (forecast prompt without the outcome,
    # recall query with entity and date and no text) stop the run before anything is paid
    forecast.plan(ctx)
    recall.plan(ctx, task_params(ctx.study, recall.TASK), None)
    mink.plan(ctx, task_params(ctx.study, mink.TASK))
    reference.plan_reference(ctx)
    found, finished, code = run_plan.planning_pass([(name, functools.partial(job, ctx)) for name, job in JOBS])
    if code != EXIT_OK:
        return code
    if found:  # one cost for the whole run, asked once (llm_jobs.run_plan)
        lines, total = run_plan.cost_table(found)
        print("\n".join(["== the whole run ==", *lines]))
        run_plan.check_max_cost(total, ctx.args.max_cost)
        price = f"${total:,.2f}" if total is not None else "an unknown price"
        confirm(f"run {sum(e.requests for e in found):,} requests for {price}?", ctx.args.yes)
    with run_plan.confirmed_run():
        return _run_jobs(ctx, finished)


def _run_jobs(ctx: JobContext, finished: set[str]) -> int:
    for name, job in JOBS:
        if name in finished:  # nothing to ask: done in the planning pass
            continue
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
