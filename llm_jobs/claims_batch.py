"""Coalition values asked many at a time: seed 002's Claim ID Reference System
(Appendix A.1: "claims are listed once in the prompt, and each coalition references
claims by index only"; Appendix D's Batched Shapley Prompt), setting
``claims_coalition_batch`` above 1.

One request lists an instance's claims once and up to ``claims_coalition_batch`` of its
pending coalitions as SETs of claim IDs (lookahead.claims.prompts.batched_coalition_prompt);
the answer is a JSON array of ``{"set": k, <field>: ...}`` objects, the field the task
kind's (classification "p", regression "value", ranking "ranking": a list of the items,
best first). Each object is checked: its set is one of the request's, named once, and
its value parses as the single coalition query's answer would (the value written as the
text that answer would have been, then read by the task kind's ``value_answer``).

What is stored is what the single-coalition path stores: one raw line per coalition,
under the coalition's own key (the single seed prompt it stands for, the same
parameters), with the answer text a single query would have returned and its parsed
value, so stg_claim_values and every cache read it unchanged, a coalition cached either
way is never asked again, and changing the batch size re-asks nothing. The line adds
``batch``: the request's size, the coalition's SET number in it and the sha256 of the
batched prompt actually sent (the full request and answer text are in
``claims_value.batches.jsonl``, one line per request).

A set missing from the answer, named twice, or with a value that does not parse is asked
again, up to ``claims_value_retries`` times, in batches half the size of the request it
was in (a smaller prompt, so a greedy answer can change), the errors named; then it is a
failure line as on the single path, never a value. A request the server does not answer
(after the backend's own retries) fails its coalitions, recorded and asked on the next run.
The empty set is never asked: RULE 2's default is its value.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from llm_jobs.claims_common import ClaimContext, claim_record
from llm_jobs.failures import QueryTally, require_complete, too_many_failures
from llm_jobs.jobs_plan import say_repaired
from llm_jobs.planning import confirm, print_plan
from llm_jobs.queries import Query
from llm_jobs.query_loop import log_queries, progress_bar, settle
from lookahead.backends.base import QueryFailure
from lookahead.cache.files import utc_now
from lookahead.cache.store import RawStore
from lookahead.claims.inputs import claims_raw_file
from lookahead.claims.prompts import batch_retry_prompt, batched_coalition_prompt
from lookahead.claims.tasks import PredictionError
from lookahead.errors import StudyConfigError
from lookahead.guard import EXIT_OK
from lookahead.stopping import draining, raise_if_stopped, should_stop

SETTING = "claims_coalition_batch"


def check_batch(ctx: ClaimContext) -> None:
    """A batch above 1 needs the seed prompt (its RULE 2 answers the sets with too few
    claims, and the empty set is its default, not asked) and a stated value (a JSON
    array states each value; a token probability is read from one next token, which a
    batch has not). Anything else is refused in one line naming the setting."""
    c = ctx.settings.claims
    if c.claims_coalition_batch <= 1:
        return
    if c.claims_coalition_prompt != "seed":
        raise StudyConfigError(
            f"setting '{SETTING}': {c.claims_coalition_batch} batches the seed's coalition prompt; it needs "
            f"claims_coalition_prompt: seed, not '{c.claims_coalition_prompt}' (or set {SETTING}: 1)"
        )
    if c.claims_coalition_value != "stated":
        raise StudyConfigError(
            f"setting '{SETTING}': {c.claims_coalition_batch} needs stated values (claims_coalition_value: stated), "
            f"not '{c.claims_coalition_value}': a batched answer states each value, no label token is read (or set {SETTING}: 1)"
        )


def batch_groups(pending: Sequence[Query], meta: dict[str, dict[str, Any]], size: int) -> list[list[Query]]:
    """The pending coalitions in requests: each request one instance's (one claim list),
    at most ``size`` coalitions, in plan order."""
    by_group: dict[str, list[Query]] = {}
    for q in pending:
        by_group.setdefault(meta[q.key]["_group"], []).append(q)
    return [qs[a : a + size] for qs in by_group.values() for a in range(0, len(qs), size)]


def batch_text(ctx: ClaimContext, group: Sequence[Query], meta: dict[str, dict[str, Any]]) -> str:
    """The batched prompt's user text for ``group`` (coalitions of one instance)."""
    first = meta[group[0].key]
    field, what = ctx.settings.kind.batch_field(ctx.settings, first["_items"])
    return batched_coalition_prompt(
        first["_task_input"], first["_claims"], [meta[q.key]["_ids"] for q in group], field, what, first["_rule"]
    )


def _array(text: str) -> list[Any]:
    """The JSON array of an answer (a code fence or words around it allowed)."""
    s = (text or "").strip()
    m = re.search(r"\[.*\]", s, re.DOTALL)
    if not m:
        raise PredictionError("the answer holds no JSON array")
    try:
        val = json.loads(m.group(0))
    except json.JSONDecodeError as exc:
        raise PredictionError(f"the answer's array is not JSON ({exc.msg})") from None
    if not isinstance(val, list):
        raise PredictionError("the answer is not a JSON array")
    return val


def parse_batch(
    ctx: ClaimContext, text: str, group: Sequence[Query], meta: dict[str, dict[str, Any]]
) -> tuple[dict[int, tuple[str, dict[str, Any], Any]], dict[int, str]]:
    """(set index -> (the single answer's text, the parsed value, the object), set
    index -> error) of a batched answer over ``group`` (index 0-based, SET k+1)."""
    ks, kind = ctx.settings, ctx.settings.kind
    field = kind.batch_field(ks, meta[group[0].key]["_items"])[0]
    try:
        objs = _array(text)
    except PredictionError as exc:
        return {}, dict.fromkeys(range(len(group)), str(exc))
    seen: dict[int, list[Any]] = {}
    for obj in objs:
        k = obj.get("set") if isinstance(obj, dict) else None
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k != int(k):
            continue  # an object without a SET number answers no set
        if 1 <= int(k) <= len(group):
            seen.setdefault(int(k) - 1, []).append(obj)
    good: dict[int, tuple[str, dict[str, Any], Any]] = {}
    errors: dict[int, str] = {}
    for i, q in enumerate(group):
        found = seen.get(i, [])
        if not found:
            errors[i] = "missing from the answer"
            continue
        if len(found) > 1:
            errors[i] = "answered more than once"
            continue
        obj = found[0]
        if field not in obj:
            errors[i] = f'no "{field}"'
            continue
        items = meta[q.key]["_items"]
        try:
            answer = kind.batch_text(obj[field], items)
            parsed = kind.value_answer(answer, [], ks, items)
        except PredictionError as exc:
            errors[i] = str(exc)
            continue
        good[i] = (answer, parsed, obj)
    return good, errors


def ask_batched(
    ctx: ClaimContext,
    groups: Sequence[Sequence[Query]],
    meta: dict[str, dict[str, Any]],
    params: dict[str, Any],
    log: list[dict[str, Any]],
) -> dict[str, dict[str, Any] | QueryFailure]:
    """Ask ``groups`` (one request each, sent together: the backend keeps its
    ``concurrency`` in flight) and re-ask what is missing or invalid; every coalition
    ends answered or failed. ``log`` gets one entry per request sent."""
    st, kind = ctx.settings, ctx.settings.kind
    retries = st.claims.claims_value_retries
    out: dict[str, dict[str, Any] | QueryFailure] = {}
    last_error: dict[str, str] = {}
    todo: list[tuple[list[Query], list[str]]] = [(list(g), []) for g in groups]
    for attempt in range(retries + 1):
        if not todo:
            break
        prompts = []
        for g, errs in todo:
            text = batch_text(ctx, g, meta)
            prompts.append(ctx.backend.render_prompt(batch_retry_prompt(text, errs) if errs else text, ctx.use_chat_template))
        # each set gets a single answer's length (claims_value_max_tokens); a cap, not a target
        max_tokens = params["max_tokens"] * max(len(g) for g, _ in todo)
        gens = ctx.backend.try_generate(prompts, max_tokens, 0)  # sent together, `concurrency` in flight
        nxt: list[tuple[list[Query], list[str]]] = []
        for (g, _errs), prompt, gen in zip(todo, prompts, gens, strict=True):
            psha = hashlib.sha256(prompt.encode()).hexdigest()
            if isinstance(gen, QueryFailure):
                for q in g:
                    out[q.key] = gen
                log.append({"prompt_sha256": psha, "sets": len(g), "attempt": attempt + 1, "failure": gen.reason})
                continue
            log.append(
                {
                    "prompt_sha256": psha,
                    "sets": len(g),
                    "attempt": attempt + 1,
                    "prompt": prompt,
                    "response_text": gen.response_text,
                }
            )
            good, errors = parse_batch(ctx, gen.response_text, g, meta)
            for i, (answer, parsed, obj) in good.items():
                out[g[i].key] = {
                    "response_text": answer,
                    "top_logprobs": [],
                    "attempts": attempt + 1,
                    **parsed,
                    "batch": {"sets": len(g), "set": i + 1, "prompt_sha256": psha, "answer": obj},
                }
            failed = [i for i in range(len(g)) if i in errors]
            for i in failed:
                last_error[g[i].key] = f"set {i + 1}: {errors[i]}"
            half = max(1, math.ceil(len(g) / 2))
            for a in range(0, len(failed), half):
                part = failed[a : a + half]
                nxt.append(([g[i] for i in part], [f"SET {j}: {errors[i]}" for j, i in enumerate(part, 1)]))
        todo = nxt
    for g, _errs in todo:
        for q in g:
            out[q.key] = QueryFailure(
                f"unparseable {kind.name} answer after {retries + 1} attempt(s): {last_error[q.key]}", retries + 1
            )
    return out


def run_batched(
    ctx: ClaimContext, task: str, queries: list[Query], meta: dict[str, dict[str, Any]], params: dict[str, Any]
) -> int:
    """The value job's loop when ``claims_coalition_batch`` > 1: the same cache, plan,
    confirmation and failure records as llm_jobs.claims_common.run_parsed, the pending
    coalitions asked in batched requests. Each coalition's line is written as soon as
    its request is answered (fsynced, one per coalition), so a kill loses at most the
    requests in flight."""
    size = ctx.settings.claims.claims_coalition_batch
    with RawStore(claims_raw_file(ctx.study, task)) as store:
        say_repaired(store)
        pending = [q for q in queries if q.key not in store]
        groups = batch_groups(pending, meta, size)
        print(
            f"{task}: {len(queries)} coalitions; cached (identical key): {len(queries) - len(pending)}; "
            f"to query: {len(pending)} in {len(groups)} batched requests of at most {size} ({SETTING})"
        )
        if not pending:
            return EXIT_OK
        requests = [
            Query(f"batch{j}", ctx.backend.render_prompt(batch_text(ctx, g, meta), ctx.use_chat_template))
            for j, g in enumerate(groups)
        ]
        print_plan(
            ctx, task, "batched requests", len(requests), requests, math.ceil(params["max_tokens"] * len(pending) / len(groups))
        )
        confirm(f"score {len(pending)} coalitions in {len(groups)} requests?", ctx.args.yes, ctx.destination)
        tally = QueryTally(task, len(pending))
        per_round = max(1, int(getattr(ctx.backend, "concurrency", 0) or 0))
        batches_path = store.path.with_name(f"{task}.batches.jsonl")
        with progress_bar(len(pending), "coalitions") as bar, draining():
            for a in range(0, len(groups), per_round):
                if should_stop():
                    break
                round_groups = groups[a : a + per_round]
                log_queries([q for g in round_groups for q in g])
                started = utc_now()
                sent: list[dict[str, Any]] = []
                results = ask_batched(ctx, round_groups, meta, params, sent)
                finished = utc_now()
                with open(batches_path, "a", encoding="utf-8") as fh:
                    fh.write("".join(json.dumps({"task": task, "finished_at": finished, **e}) + "\n" for e in sent))
                for g in round_groups:
                    for q in g:
                        base = claim_record(ctx, task, q, params, {k: v for k, v in meta[q.key].items() if not k.startswith("_")})
                        res = results[q.key]
                        reason = settle(store, task, q, base, res, started, finished)
                        tally.count(reason, isinstance(res, QueryFailure) and res.permanent)
                        bar.update(1)
                if tally.server_down:
                    bar.close()
                    raise too_many_failures(task, tally, store)
        raise_if_stopped()
        require_complete(tally, store)
    return EXIT_OK
