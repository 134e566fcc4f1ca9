"""The LLM jobs in order (forecast and Min-K% from one pass where the backend shares it,
then forecast, recall, Min-K%, and the reference model's prompt log-probs when the study
computes the reference-model LAP), the target model loaded once.

Run: ``python -m llm_jobs.run_all --study FILE --yes``

Every job is planned first and the whole run's requests, tokens and price are printed
as one table and asked for once (llm_jobs.run_plan; --max-cost refuses a run above a
limit); then each job prints its own plan and runs. A forecast
parse rate below 95% stops the run before recall, as the protocol asks for a decision.

The claim jobs (a study with claim settings; lookahead.claims.run names them) are planned
and counted in the same table, after the protocol's. A claim job reads what the one before
it answers (extraction reads the agents' rationales, coalition values the extractions), so
one planned after a job that still has queries to ask is counted from the answers there
are now; the table says so, and that job asks again when it runs only if it then has
more to ask (its question then differs from the one planned).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

from llm_jobs import (
    claims_extract,
    claims_rationale,
    claims_repredict,
    claims_support,
    claims_timespec,
    claims_value,
    forecast,
    fused,
    mink,
    recall,
    reference,
    run_plan,
)
from llm_jobs.claims_common import make_claim_context
from llm_jobs.cli import arg_parser
from llm_jobs.context import JobContext, job_study, make_context
from llm_jobs.planning import confirm
from lookahead.claims.run import claim_jobs
from lookahead.config import Study
from lookahead.guard import EXIT_OK, JobStop, guarded
from lookahead.keys import task_params

#: forecast+mink first: one pass answers and scores each row that misses both lines
#: (llm_jobs.fused); the forecast and Min-K% jobs then ask what is left and summarise.
JOBS = (
    ("forecast+mink", fused.run),
    ("forecast", forecast.run),
    ("recall", recall.run),
    ("mink", mink.run),
    ("reference", reference.run),
)

#: The claim jobs' modules (lookahead.claims.run.claim_jobs names them, in the
#: pipeline's order) -> the function that runs one on its context.
CLAIM_JOB_RUNS = {
    "llm_jobs.claims_rationale": claims_rationale.run,
    "llm_jobs.claims_timespec": claims_timespec.run,
    "llm_jobs.claims_extract": claims_extract.run,
    "llm_jobs.claims_support": claims_support.run,
    "llm_jobs.claims_value": claims_value.run,
    "llm_jobs.claims_repredict": claims_repredict.run,
}

Job = tuple[str, Callable[[], int]]


def claim_job_list(study: Study, args: argparse.Namespace) -> list[Job]:
    """The study's claim jobs (none without claim settings), each on a context of its own
    made once, when the job first runs: the planning pass and the run share it. Every
    context is made on ``study``, the one the run loaded (with its overrides)."""
    jobs: list[Job] = []
    for spec in claim_jobs(study):
        module, extra = spec[0], spec[1:]
        ns = argparse.Namespace(**vars(args))
        if "--agent" in extra:
            ns.agent = extra[extra.index("--agent") + 1]
        name = module.rsplit(".", 1)[1] + (f" ({ns.agent})" if "--agent" in extra else "")
        jobs.append((name, functools.partial(_claim_job, CLAIM_JOB_RUNS[module], ns, study, {})))
    return jobs


def _claim_job(run: Callable, ns: argparse.Namespace, study: Study, made: dict) -> int:
    if "ctx" not in made:
        made["ctx"] = make_claim_context(ns, study)  # the run's study: not read again
    return run(made["ctx"])


def run(ctx: JobContext | None, claims: Sequence[Job] = (), max_cost: float | None = None, yes: bool = False) -> int:
    """Every job planned, one table, one question; then the jobs. ``ctx`` is None for a
    claim-only study (no protocol jobs)."""
    protocol: list[Job] = []
    if ctx is not None:
        # every task's plan first: the template guards (forecast prompt without the outcome,
        # recall query with entity and date and no text) stop the run before anything is paid
        forecast.plan(ctx)
        recall.plan(ctx, task_params(ctx.study, recall.TASK), None)
        mink.plan(ctx, task_params(ctx.study, mink.TASK))
        reference.plan_reference(ctx)
        protocol = [(name, functools.partial(job, ctx)) for name, job in JOBS]
        max_cost, yes = ctx.args.max_cost, ctx.args.yes
    questions: dict[str, str] = {}
    claim_names = [name for name, _ in claims]
    uncounted: list[str] = []
    planned_claims = [
        (name, functools.partial(_plan_claim_job, name, job, claim_names, questions, uncounted)) for name, job in claims
    ]
    found, finished, code = run_plan.planning_pass([*protocol, *planned_claims], questions)
    if code != EXIT_OK:
        return code
    later = _later_claim_jobs(found, claim_names)
    if found:  # one cost for the whole run, asked once (llm_jobs.run_plan)
        lines, total = run_plan.cost_table(found)
        print("\n".join(["== the whole run ==", *lines, *_later_claim_note(found, claim_names, uncounted)]))
        run_plan.check_max_cost(total, max_cost)
        price = f"${total:,.2f}" if total is not None else "an unknown price"
        confirm(f"run {sum(e.requests for e in found):,} requests for {price}?", yes)
    with run_plan.confirmed_run():
        code = _run_jobs(protocol, finished)
    if code != EXIT_OK:
        return code
    # the claim jobs answer only the questions planned above: one whose input an earlier
    # claim job has just written asks for what it now has to ask
    with run_plan.confirmed_run([questions[n] for n in claim_names if n in questions]):
        return _run_jobs(claims, finished - set(later))


def _plan_claim_job(
    name: str, job: Callable[[], int], claim_names: Sequence[str], questions: dict[str, str], uncounted: list[str]
) -> int:
    """A claim job in the planning pass. After a claim job that has queries to ask, one
    that cannot plan yet (no predictions before the agents answer) is left uncounted, not
    a stop: it plans and asks when it runs."""
    if not any(n in questions for n in claim_names[: claim_names.index(name)]):
        return job()
    try:
        return job()
    except JobStop as stop:
        print(f"{name}: not counted yet ({stop})")
        uncounted.append(name)
        return EXIT_OK


def _later_claim_jobs(found: Sequence[run_plan.Estimate], claim_names: Sequence[str]) -> list[str]:
    """The claim jobs after the first that has queries to ask: they read what it is about
    to answer, so what they will ask is known only when they run."""
    pending = [n for n in claim_names if any(e.job == n and e.requests for e in found)]
    return list(claim_names[claim_names.index(pending[0]) + 1 :]) if pending else []


def _later_claim_note(found: Sequence[run_plan.Estimate], claim_names: Sequence[str], uncounted: Sequence[str]) -> list[str]:
    """A line under the table when a claim job reads what an earlier claim job of this run
    has yet to answer: its row counts only what can be known now."""
    later = _later_claim_jobs(found, claim_names)
    if not later:
        return []
    first = claim_names[claim_names.index(later[0]) - 1]
    none_yet = f" ({', '.join(uncounted)}: nothing yet)" if uncounted else ""
    return [
        f"note: {', '.join(later)} come after {first}, which has queries to ask and may give them more "
        f"to do: counted from the answers there are now{none_yet}; each asks again when it runs only if it "
        "then has more to ask"
    ]


def _run_jobs(jobs: Sequence[Job], finished: set[str]) -> int:
    for name, job in jobs:
        if name in finished:  # nothing to ask: done in the planning pass
            continue
        print(f"== {name} ==")
        code = job()
        if code != EXIT_OK:
            return code
    return EXIT_OK


def run_study(args: argparse.Namespace) -> int:
    """The study's jobs: the protocol's (a protocol study) and its claim jobs (when it has
    claim settings), one plan and one question for all. The study is loaded once
    (llm_jobs.context.job_study: `lookahead`'s resolved settings, else the study file)
    and every job's context is made on it."""
    from lookahead.cli import STUDY_KINDS

    study = job_study(args)
    claims = claim_job_list(study, args)
    if STUDY_KINDS[study.output.study_kind].protocol_jobs:
        return run(make_context(args, study=study), claims)
    return run(None, claims, args.max_cost, args.yes)


def main(argv: Sequence[str] | None = None) -> int:
    args = arg_parser(
        "Run the forecast, recall, Min-K% (and reference-model) jobs for one study, then its claim jobs."
    ).parse_args(argv)
    return guarded(lambda: run_study(args))


if __name__ == "__main__":
    sys.exit(main())
