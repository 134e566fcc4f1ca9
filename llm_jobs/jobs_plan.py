"""One cost for all the jobs a process runs: every job's plan first, summed, then one question.

Why: each job printed its own estimate and asked on its own, so the figures scrolled past
and no one saw what the jobs together would cost before the first request. `run_all` now plans
every job first (each job runs up to its confirmation and stops there, having asked
nothing: :func:`planning_pass`), prints one table (requests, prompt and output tokens,
price per job, and their sum), refuses a run above ``--max-cost``, and asks once; the jobs
then run with that answer (:func:`confirmed_jobs`).

The planning pass is each job's own code up to its confirmation (cache lookups, prompt
guards, the recall label check), so the table counts exactly what the jobs will ask.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import io
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lookahead.errors import LookaheadError
from lookahead.guard import EXIT_OK, JobStop

if TYPE_CHECKING:
    from lookahead.cache.store import RawStore


@dataclass(frozen=True)
class Estimate:
    """One job's plan: what it will ask and what that costs (None: no price known)."""

    task: str
    requests: int
    prompt_tokens: int
    output_tokens: int
    cost: float | None
    job: str = ""  # the job of the planning pass that made it (planning_pass)


class Planned(LookaheadError):
    """A job reached its confirmation in the planning pass: its plan is recorded, nothing asked."""


#: None outside the planning pass; the estimates recorded so far inside it.
_estimates: contextvars.ContextVar[list[Estimate] | None] = contextvars.ContextVar("estimates", default=None)
#: None outside the planning pass; inside it, task -> the keys an earlier job of the run
#: will answer (llm_jobs.fused writes forecast and Min-K% lines from one pass).
_elsewhere: contextvars.ContextVar[dict[str, set[str]] | None] = contextvars.ContextVar("elsewhere", default=None)
#: True while the jobs run after the whole run was confirmed once.
_confirmed: contextvars.ContextVar[bool] = contextvars.ContextVar("confirmed", default=False)
#: While jobs run under a confirmation of some of their questions only (the claim jobs):
#: those questions, each answered once; any other question is asked.
_answered: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("answered", default=None)


#: Inside the planning pass, the stream its held-back output would have gone to.
_outer: contextvars.ContextVar[Any] = contextvars.ContextVar("outer", default=None)


def say_now(line: str) -> None:
    """Print ``line`` now, also inside the planning pass, whose output is held back (each job
    prints its plan again when it runs): what happens once (a torn last line repaired, a
    note recorded) is not said again when the job runs, so it is shown when it happens."""
    print(line, file=_outer.get() or sys.stdout, flush=True)


def say_repaired(store: RawStore) -> None:
    """Say that opening ``store`` repaired a torn last line (a killed writer's), when it
    happened: every job that opens a raw file says it the same way (:func:`say_now`)."""
    if store.repaired_bytes:
        say_now(f"repaired a torn last line in {store.path} ({store.repaired_bytes} bytes moved aside)")


def record(estimate: Estimate) -> None:
    """Called by each job's plan (llm_jobs.planning.print_plan)."""
    found = _estimates.get()
    if found is not None:
        found.append(estimate)


def answered_elsewhere(task: str, keys: Iterable[str]) -> None:
    """Called by a job that answers `task`'s queries ``keys`` for another task's job: in the
    planning pass that job then counts none of them (:func:`not_answered_elsewhere`), so
    the table counts each request once, as it will be sent."""
    found = _elsewhere.get()
    if found is not None:
        found.setdefault(task, set()).update(keys)


def not_answered_elsewhere(task: str, queries: Sequence[Any]) -> Sequence[Any]:
    """``queries`` (a job's queries left to ask) without those an earlier job of the run
    answers (:func:`answered_elsewhere`); all of them outside the planning pass, where the
    earlier job has written its answers before this one looks. When that leaves none, the
    job's planning ends here (:class:`Planned`): it runs, and summarises, after that job."""
    found = (_elsewhere.get() or {}).get(task)
    if not found:
        return queries
    from llm_jobs.queries import QueryPlan, keys_of

    at = [i for i, k in enumerate(keys_of(queries)) if k not in found]
    if len(at) == len(queries):
        return queries
    if not at:  # all of them: the job runs after that one, not here (it would find no answers yet)
        raise Planned(f"{task}: every query is answered by an earlier job of the run")
    return queries.take(at) if isinstance(queries, QueryPlan) else [queries[i] for i in at]


def at_confirmation(question: str) -> bool:
    """Called by llm_jobs.planning.confirm: stop a planning pass here (nothing is asked);
    True when the whole run was confirmed already (the job goes on without asking)."""
    if _estimates.get() is not None:
        raise Planned(question)
    answered = _answered.get()
    if _confirmed.get() or (answered is not None and question in answered):
        if answered is not None and question in answered:
            answered.remove(question)
        print(f"{question} yes (the whole run was confirmed above)")
        return True
    return False


def planning_pass(
    jobs: Sequence[tuple[str, Callable[[], int]]], questions: dict[str, str] | None = None
) -> tuple[list[Estimate], set[str], int]:
    """(every job's estimate, the jobs already finished, exit code): each job run up to its
    confirmation, its output held back (it prints its plan again when it runs). A job with
    nothing to ask finishes here, as it would in the run, and its output is shown: the run
    does not repeat it. A job that stops (a parse rate below 95%, a failed check) ends the
    pass with its code, before anything was asked. ``questions`` receives each planned
    job's question (job name -> the question it stopped at), and each estimate is tagged
    with the job that made it (:attr:`Estimate.job`)."""
    found: list[Estimate] = []
    finished: set[str] = set()
    token = _estimates.set(found)
    elsewhere = _elsewhere.set({})
    outer = _outer.set(sys.stdout)
    try:
        for name, job in jobs:
            held = io.StringIO()
            before = len(found)
            try:
                with contextlib.redirect_stdout(held):
                    code = job()
            except Planned as planned:
                if questions is not None:
                    questions[name] = str(planned)
                continue
            finally:
                found[before:] = [dataclasses.replace(e, job=name) for e in found[before:]]
            print(f"== {name} ==\n{held.getvalue()}", end="")
            if code != EXIT_OK:
                return found, finished, code
            finished.add(name)
    finally:
        _estimates.reset(token)
        _elsewhere.reset(elsewhere)
        _outer.reset(outer)
    return found, finished, EXIT_OK


def cost_table(found: Sequence[Estimate]) -> tuple[list[str], float | None]:
    """The table's lines and the run's total cost (None when a job's price is unknown)."""
    w = max([12, *(len(e.task) + 2 for e in found)])  # the claim jobs' names are longer
    lines = [f"{'job':<{w}}{'requests':>10}{'prompt tokens':>16}{'output tokens':>16}{'price':>14}"]
    total: float | None = 0.0
    for e in found:
        price = f"${e.cost:,.2f}" if e.cost is not None else "unknown"
        lines.append(f"{e.task:<{w}}{e.requests:>10,}{e.prompt_tokens:>16,}{e.output_tokens:>16,}{price:>14}")
        total = None if total is None or e.cost is None else total + e.cost
    sums = [sum(getattr(e, f) for e in found) for f in ("requests", "prompt_tokens", "output_tokens")]
    price = f"${total:,.2f}" if total is not None else "unknown"
    lines.append(f"{'whole run':<{w}}{sums[0]:>10,}{sums[1]:>16,}{sums[2]:>16,}{price:>14}")
    return lines, total


def check_max_cost(total: float | None, max_cost: float | None) -> None:
    """Refuse a run whose estimated cost is above --max-cost, or unknown under one."""
    if max_cost is None:
        return
    if total is None:
        raise JobStop(f"--max-cost {max_cost:g}: the run's cost is unknown (set price_per_1k_tokens); nothing was queried")
    if total > max_cost:
        raise JobStop(
            f"--max-cost {max_cost:g}: the run's estimated cost ${total:,.2f} is above it; "
            "nothing was queried (a subsample, --subsample N, costs less)"
        )


@contextlib.contextmanager
def confirmed_jobs(questions: Iterable[str] | None = None) -> Iterator[None]:
    """The jobs run with the one answer for all of them: no job asks again. With ``questions``,
    only those questions are answered (each once): a question the planning pass did not
    see, or saw with another count, is asked (a claim job whose input an earlier job of
    the run was still to write; a TimeSPEC phase or an extraction retry)."""
    if questions is None:
        token = _confirmed.set(True)
        try:
            yield
        finally:
            _confirmed.reset(token)
        return
    answered = _answered.set(list(questions))
    try:
        yield
    finally:
        _answered.reset(answered)
