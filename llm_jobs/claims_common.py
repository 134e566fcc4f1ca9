"""What the claim jobs share: the context (study, settings, backend, instances) and the
raw-line skeleton with the claim identifiers.

The claim jobs follow the other jobs' crash-safety contract (llm_jobs.query_loop): one
fsynced line per answer, keys that cover model, instance, exact prompt and parameters,
so a killed job resumes where it stopped and never pays twice. Their lines carry extra
fields (instance_id, agent, ...) that lookahead.claims.tables matches on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from llm_jobs.context import Backends, JobContext, check_study_links, job_study
from llm_jobs.failures import require_complete
from llm_jobs.jobs_plan import say_repaired
from llm_jobs.planning import confirm, print_plan
from llm_jobs.queries import Query
from llm_jobs.query_loop import logprob_dicts, record_skeleton, run_queries
from lookahead.backends.base import QueryFailure
from lookahead.cache.store import RawStore
from lookahead.claims.inputs import ClaimsResolved, claim_study, claims_raw_file, load_predictions
from lookahead.claims.prompts import answer_retry_prompt
from lookahead.claims.tasks import PredictionError
from lookahead.config import Study
from lookahead.guard import EXIT_OK, JobStop
from lookahead.keys import query_key


class ClaimContext(JobContext):
    """JobContext without protocol rows, plus the claim settings."""

    settings: ClaimsResolved

    def claim_query(self, task: str, ident: str, text: str, params: Mapping[str, Any]) -> Query:
        """One claim prompt as a query: ``text`` rendered as the backend renders the study's
        prompts (its chat template when the study uses one), keyed by
        lookahead.keys.query_key with the study's model, ``ident`` and ``params``. The one
        rule every claim job keys a prompt by, so the next run of a job finds the lines
        the last one wrote."""
        prompt = self.backend.render_prompt(text, self.use_chat_template)
        return Query(query_key(task, self.study.backend.model_id, ident, prompt, params), prompt, row_id=ident)


def value_answer_params(ctx: ClaimContext) -> dict[str, Any]:
    """The parameters of a query answered with the task kind's value (a coalition's, and
    a re-prediction's, which asks the same instruction): greedy, one token when the value
    is read from its log-probs, else the value's token budget. Part of each query's key,
    so a change of any of them asks again."""
    st, kind = ctx.settings, ctx.settings.kind
    top = kind.value_top_logprobs(st)
    return {
        "temperature": 0,
        "max_tokens": 1 if top else st.claims.claims_value_max_tokens,
        "top_logprobs": top,
        "seed": 0,
        "n_samples": None,
        "chat_template": ctx.use_chat_template,
        "labels": list(st.labels),
        "task_kind": kind.name,
        "retries": st.claims.claims_value_retries,
    }


def make_claim_context(args: Any, study: Study | None = None, backends: Backends | None = None) -> ClaimContext:
    """The claim jobs' context on ``study`` (the process's study, loaded once by
    llm_jobs.run_all: the overrides `lookahead run` passes reach the claim jobs as they
    reach the protocol's), else on the study the arguments name (llm_jobs.context.job_study);
    its backend from ``backends``, the process's, when given."""
    study = claim_study(study or job_study(args))  # the claim model, when the study names one
    check_study_links(study)
    ctx = ClaimContext(study, args, pd.DataFrame(), 0, backends=backends)
    ctx.settings = ClaimsResolved.from_study(study)
    return ctx


def predictions(ctx: ClaimContext) -> pd.DataFrame:
    """The instances to evaluate; rejects printed one line each (never a traceback)."""
    preds, rejects = load_predictions(ctx.study, ctx.settings)
    for r in rejects:
        where = f"row {r['row']}" if r["row"] is not None else ""
        print(f"{r['source']} {where} column {r['column']}: {r['reason']}".replace("  ", " "))
    if preds.empty:
        raise JobStop(
            "no instances: set claims_predictions_path, or claims_instances_path with claims_agent_jobs "
            "(`lookahead jobs` runs the agent jobs first)"
        )
    return preds


def claim_record(ctx: ClaimContext, task: str, q: Query, params: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    rec = record_skeleton(ctx, task, q, params)
    rec.update(extra)
    return rec


def exact_logprobs(ctx: ClaimContext, prompts: Sequence[str]) -> list[dict[str, float]] | None:
    """label -> exact log P(label | prompt) for each prompt when the task kind's value
    reads label tokens (``claims_coalition_value: token``): the backend's label scoring
    over its full next-token distribution (transformers' label_logprobs), never the
    top-20 that censors a label outside it. None when the value is stated."""
    labels = ctx.settings.kind.exact_labels(ctx.settings)
    if not labels or not prompts:
        return None
    scored = ctx.backend.label_logprobs(list(prompts), {lab: lab for lab in labels})  # type: ignore[attr-defined]
    return [{e["role"]: float(e["logprob"]) for e in row} for row in scored]


def ask_parsed(
    ctx: ClaimContext, batch: Sequence[Query], texts: Sequence[str], items: Sequence[Sequence[str] | None], params: dict[str, Any]
) -> list[dict[str, Any] | QueryFailure]:
    """Ask ``batch`` (greedy) and parse each answer with the task kind's
    ``value_answer`` (a stated probability or value; with ``claims_coalition_value:
    token`` the labels' exact log-probabilities, scored over the whole vocabulary); an
    answer that does not parse is asked again, up to
    ``claims_value_retries`` times, with a prompt naming the error (``texts`` are the
    queries' user texts, ``items`` a ranking's items). A query still unparseable is a
    QueryFailure: recorded as a failure and retried on the next run, never cached as an
    answer. Used by the coalition values and the re-prediction job."""
    st = ctx.settings
    kind, ks = st.kind, st
    max_tokens, top = params["max_tokens"], params["top_logprobs"]
    out: list[dict[str, Any] | QueryFailure | None] = [None] * len(batch)
    errors: dict[int, tuple[str, str]] = {}
    prompts: Sequence[str] | dict[int, str] = [q.prompt for q in batch]  # then the retries' prompts
    for attempt in range(st.claims.claims_value_retries + 1):
        todo = list(range(len(batch))) if attempt == 0 else list(errors)
        if not todo:
            break
        if attempt:
            prompts = {
                i: ctx.backend.render_prompt(answer_retry_prompt(texts[i], *errors[i]), ctx.use_chat_template) for i in todo
            }
        gens = ctx.backend.generate([prompts[i] for i in todo], max_tokens, top)
        exact = exact_logprobs(ctx, [prompts[i] for i in todo])
        for j, (i, g) in enumerate(zip(todo, gens, strict=True)):
            text, lps = g.response_text, logprob_dicts(g.top_logprobs)
            try:
                parsed = kind.value_answer(text, lps, ks, items[i], exact[j] if exact else None)
            except PredictionError as exc:
                errors[i] = (text or "", str(exc))
                continue
            errors.pop(i, None)
            answer = {"response_text": text, "top_logprobs": lps, "attempts": attempt + 1, **parsed}
            if attempt:
                answer["retry_prompt"] = prompts[i]
            out[i] = answer
    for i, (_text, err) in errors.items():
        attempts = st.claims.claims_value_retries + 1
        out[i] = QueryFailure(f"unparseable {kind.name} answer after {attempts} attempt(s): {err}", attempts)
    done = [r for r in out if r is not None]
    assert len(done) == len(out), "every query ends answered or failed"
    return done


def run_parsed(
    ctx: ClaimContext,
    task: str,
    queries: list[Query],
    meta: dict[str, dict[str, Any]],
    params: dict[str, Any],
    unit: str,
    verb: str,
) -> int:
    """Ask the pending ``queries`` of a job whose answers are parsed by the task kind
    (coalition values, re-predictions): one cache, one plan, one confirmation, answers
    through ``ask_parsed`` and records whose fields are ``meta`` less its ``_`` keys.
    One loop for both jobs, so retry-then-failure and resuming behave the same in each."""
    with RawStore(claims_raw_file(ctx.study, task)) as store:
        say_repaired(store)
        pending = [q for q in queries if q.key not in store]
        print_plan(ctx, task, unit, len(queries), pending, params["max_tokens"])
        if pending:
            confirm(f"{verb} {len(pending)} {unit}?", ctx.args.yes, ctx.destination)

            def answer(batch: list[Query]) -> list[Any]:
                return ask_parsed(
                    ctx, batch, [meta[q.key]["_text"] for q in batch], [meta[q.key]["_items"] for q in batch], params
                )

            def record(q: Query) -> dict[str, Any]:
                return claim_record(ctx, task, q, params, {k: v for k, v in meta[q.key].items() if not k.startswith("_")})

            require_complete(run_queries(store, pending, ctx.batch_size, task, answer, record), store)
    return EXIT_OK
