"""Every LLM job, protocol and claim alike, as one entry of :data:`JOBS`, in the order a
run runs them: `lookahead jobs` and `lookahead run` (llm_jobs.run_all) run the entries a
study needs, one after the other, in one process.

An entry names the job, the function that runs it (imported here, so the import graph
holds every job: tests/python/test_import_graph.py), which context it runs on (the
protocol's rows, or the claim pipeline's instances), which studies need it (the study kind
and the settings that call for it, in words and as a test) and the plan its prompts are
checked with before anything is asked.

Why one table: the protocol jobs were a list in llm_jobs.run_all and the claim jobs
module names in strings, started one process each; a job added in one place was unseen
in the other, and the import graph could not see the claim jobs. A new job is a function
``run(ctx) -> exit code`` in a module of llm_jobs and one entry here (docs/CONTRACTS.md,
"Layout")."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

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
)
from lookahead.claims.inputs import has_claims
from lookahead.claims.prompts import AGENTS
from lookahead.config import Study, StudyConfigError
from lookahead.keys import task_params

#: The context a job runs on: ``protocol`` the study's rows (llm_jobs.context.make_context),
#: ``claims`` the claim pipeline's (llm_jobs.claims_common.make_claim_context, on the claim
#: model when the study names one).
Context = Literal["protocol", "claims"]


@dataclass(frozen=True)
class Need:
    """Which studies need a job: ``words`` for a reader (docs, --help), ``test`` on the
    resolved study."""

    words: str
    test: Callable[[Study], bool]


@dataclass(frozen=True)
class JobEntry:
    """One LLM job. Its place in :data:`JOBS` is its order in a run."""

    name: str  # as the run prints it and the cost table shows it
    run: Callable[[Any], int]  # the job on its context -> exit code (lookahead.guard)
    context: Context
    needs: Need
    plan: Callable[[Any], object] | None = None  # its prompt guards, run before any job asks anything
    agent: str | None = None  # an agent job: its name in the setting claims_agent_jobs

    @property
    def module(self) -> str:
        """The module of the function the entry runs (a bound agent's too)."""
        run = self.run.func if isinstance(self.run, functools.partial) else self.run
        return str(run.__module__)


def protocol_study(study: Study) -> bool:
    """A study that asks the protocol's queries (lookahead.cli.STUDY_KINDS: protocol_jobs)."""
    from lookahead.cli import STUDY_KINDS

    return STUDY_KINDS[study.output.study_kind].protocol_jobs


def agent_job(agent: str) -> Need:
    """An agent job on the task instances: named in claims_agent_jobs."""

    def test(study: Study) -> bool:
        return has_claims(study) and bool(study.claims.claims_instances_path) and agent in _agents(study)

    return Need(f"claims_instances_path set and '{agent}' in claims_agent_jobs", test)


def _agents(study: Study) -> list[str]:
    """claims_agent_jobs, each one the name of an agent job here (one line for another)."""
    agents = list(study.claims.claims_agent_jobs or [])
    known = [e.agent for e in JOBS if e.agent]
    for agent in agents:
        if agent not in known:
            raise StudyConfigError(f"setting 'claims_agent_jobs': '{agent}' is not one of {', '.join(known)}")
    return agents


PROTOCOL = Need("a protocol study (study_kind: protocol)", protocol_study)
CLAIMS = Need("a study with claim settings (claims_predictions_path or claims_instances_path)", has_claims)
LLM_SUPPORT = Need(
    "a study with claim settings and claims_support_judge: llm",
    lambda s: has_claims(s) and s.claims.claims_support_judge == "llm",
)

#: Every LLM job, in the order a run runs them. forecast+mink first: one pass answers and
#: scores each row that misses both lines (llm_jobs.fused); the forecast and Min-K% jobs
#: then ask what is left and summarise. The claim jobs follow in the pipeline's order,
#: each reading what the one before it answers: the agents' rationales (TimeSPEC last: it
#: reads the other agents' reference extractions), extraction, support judgments, coalition
#: values, the re-prediction check.
JOBS: tuple[JobEntry, ...] = (
    JobEntry("forecast+mink", fused.run, "protocol", PROTOCOL),
    JobEntry("forecast", forecast.run, "protocol", PROTOCOL, forecast.plan),
    JobEntry("recall", recall.run, "protocol", PROTOCOL, lambda ctx: recall.plan(ctx, task_params(ctx.study, recall.TASK), None)),
    JobEntry("mink", mink.run, "protocol", PROTOCOL, lambda ctx: mink.plan(ctx, task_params(ctx.study, mink.TASK))),
    JobEntry("reference", reference.run, "protocol", PROTOCOL, reference.plan_reference),
    *(
        JobEntry(
            f"claims_rationale ({agent})",
            functools.partial(claims_rationale.run_agent, agent=agent),
            "claims",
            agent_job(agent),
            agent=agent,
        )
        for agent in AGENTS
    ),
    JobEntry("claims_timespec", claims_timespec.run, "claims", agent_job("timespec"), agent="timespec"),
    JobEntry("claims_extract", claims_extract.run, "claims", CLAIMS),
    JobEntry("claims_support", claims_support.run, "claims", LLM_SUPPORT),
    JobEntry("claims_value", claims_value.run, "claims", CLAIMS),
    JobEntry("claims_repredict", claims_repredict.run, "claims", CLAIMS),
)


def study_jobs(study: Study, only: Sequence[str] | None = None) -> list[JobEntry]:
    """The entries ``study`` needs, in order (an unknown name in claims_agent_jobs: one line).
    ``only`` (`lookahead jobs --only NAME`): the entries of those names instead, in the
    registry's order, whether or not the study's settings call for them (one job rerun on
    its own, as each job's module once ran it); an unknown name is one line naming the jobs."""
    if only:
        names = {e.name for e in JOBS}
        unknown = [n for n in only if n not in names]
        if unknown:
            raise StudyConfigError(f"--only {unknown[0]!r}: no such job; the jobs are {', '.join(repr(e.name) for e in JOBS)}")
        return [e for e in JOBS if e.name in only]
    if has_claims(study) and study.claims.claims_instances_path:
        _agents(study)
    return [e for e in JOBS if e.needs.test(study)]
