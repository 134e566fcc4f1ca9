"""The LLM jobs a study needs, in the order of their registry (llm_jobs.registry: forecast
and Min-K% from one pass where the backend shares it, then forecast, recall, Min-K%, and
the reference model's prompt log-probs when the study computes the reference-model LAP;
then the claim jobs), in this one process: each model is loaded once and shared by every
job that asks it (llm_jobs.context.Backends).

Run by `lookahead jobs` and `lookahead run`, in the environment the study's backend needs
(lookahead.children.job_python): the job process those commands start, kept as a module they
run with ``python -m`` because its interpreter may be another environment's (.venv-vllm).
One job alone: ``lookahead jobs --study FILE --only NAME`` (a name of llm_jobs.registry).

Every job is planned first and the whole run's requests, tokens and price are printed
as one table and asked for once (llm_jobs.jobs_plan; --max-cost refuses a run above a
limit); then each job prints its own plan and runs. A forecast
parse rate below 95% stops the run before recall, as the protocol asks for a decision.

The claim jobs (a study with claim settings) are planned and counted in the same table,
after the protocol's. A claim job reads what the one before it answers (extraction reads
the agents' rationales, coalition values the extractions), so one planned after a job
that still has queries to ask is counted from the answers there are now; the table says
so, and that job asks again when it runs only if it then has more to ask (its question
then differs from the one planned).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

from llm_jobs import jobs_plan
from llm_jobs.claims_common import make_claim_context
from llm_jobs.cli import arg_parser
from llm_jobs.context import Backends, JobContext, job_study, make_context
from llm_jobs.planning import confirm
from llm_jobs.registry import JobEntry, study_jobs
from lookahead.guard import EXIT_OK, JobStop, guarded

Job = tuple[str, Callable[[], int]]


def _on_context(entry: JobEntry, context: Callable[[], JobContext]) -> Job:
    """The entry as a job of this run: its function on the context ``context`` gives."""
    return (entry.name, lambda: entry.run(context()))


def run(protocol: Sequence[Job], claims: Sequence[Job] = (), max_cost: float | None = None, yes: bool = False) -> int:
    """Every job planned, one table, one question; then the jobs: the protocol's (none for
    a claim-only study), then the claim jobs."""
    questions: dict[str, str] = {}
    claim_names = [name for name, _ in claims]
    uncounted: list[str] = []
    planned_claims = [
        (name, functools.partial(_plan_claim_job, name, job, claim_names, questions, uncounted)) for name, job in claims
    ]
    found, finished, code = jobs_plan.planning_pass([*protocol, *planned_claims], questions)
    if code != EXIT_OK:
        return code
    later = _later_claim_jobs(found, claim_names)
    if found:  # one cost for the whole run, asked once (llm_jobs.jobs_plan)
        lines, total = jobs_plan.cost_table(found)
        print("\n".join(["== the whole run ==", *lines, *_later_claim_note(found, claim_names, uncounted)]))
        jobs_plan.check_max_cost(total, max_cost)
        price = f"${total:,.2f}" if total is not None else "an unknown price"
        confirm(f"run {sum(e.requests for e in found):,} requests for {price}?", yes)
    with jobs_plan.confirmed_jobs():
        code = _run_jobs(protocol, finished)
    if code != EXIT_OK:
        return code
    # the claim jobs answer only the questions planned above: one whose input an earlier
    # claim job has just written asks for what it now has to ask
    with jobs_plan.confirmed_jobs([questions[n] for n in claim_names if n in questions]):
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


def _later_claim_jobs(found: Sequence[jobs_plan.Estimate], claim_names: Sequence[str]) -> list[str]:
    """The claim jobs after the first that has queries to ask: they read what it is about
    to answer, so what they will ask is known only when they run."""
    pending = [n for n in claim_names if any(e.job == n and e.requests for e in found)]
    return list(claim_names[claim_names.index(pending[0]) + 1 :]) if pending else []


def _later_claim_note(found: Sequence[jobs_plan.Estimate], claim_names: Sequence[str], uncounted: Sequence[str]) -> list[str]:
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
    """The study's jobs: the registry's entries it needs (llm_jobs.registry), in order,
    one plan and one question for all. The study is loaded once (llm_jobs.context.job_study:
    `lookahead`'s resolved settings, else the study file); the protocol jobs share one
    context, the claim jobs another, and every model is loaded once (Backends)."""
    study = job_study(args)
    entries = study_jobs(study, args.only)
    backends = Backends()
    protocol = [e for e in entries if e.context == "protocol"]
    claims = [e for e in entries if e.context == "claims"]
    if protocol:
        ctx = make_context(args, study=study, backends=backends)
        # every job's plan first: the template guards (forecast prompt without the outcome,
        # recall query with entity and date and no text) stop the run before anything is paid
        for entry in protocol:
            if entry.plan is not None:
                entry.plan(ctx)
        protocol_jobs = [_on_context(e, lambda: ctx) for e in protocol]
    else:
        protocol_jobs = []
    # one context for every claim job, made when the first runs (the run's study: not read again)
    claim_ctx = functools.cache(lambda: make_claim_context(args, study, backends))
    return run(protocol_jobs, [_on_context(e, claim_ctx) for e in claims], args.max_cost, args.yes)


def main(argv: Sequence[str] | None = None) -> int:
    args = arg_parser("Run the LLM jobs one study needs (llm_jobs.registry), in order, in one process.").parse_args(argv)
    return guarded(lambda: run_study(args))


if __name__ == "__main__":
    sys.exit(main())
