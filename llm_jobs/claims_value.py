"""Coalition values v(S) for the Shapley values (seed 002, phase 2).

Run alone: ``lookahead jobs --study FILE --only claims_value --yes`` (else with the study's other jobs)

One greedy query per coalition S: the task input and only the claims in S
(lookahead.claims.prompts.coalition_prompt) with the task kind's answer instruction
(lookahead.claims.tasks). What is stored is the kind's parsed answer:

* classification: one step with the top-20 log-probabilities and P(label) for every
  label by the protocol rule (lookahead.scoring.label_probability; a label outside the
  top 20 is stored as None and read as 0). The tables take v(S) = P(target class | S)
  (or P(own prediction | S), setting ``claims_class_value``) from it, so one query
  serves either reading;
* regression: the answer parsed as a number >= 0 (v(S) = that value);
* ranking: the answer parsed as a ranking of exactly the instance's items (v(S) =
  1 - Spearman(r(S), r_N), computed by the tables from the full coalition's ranking).

An answer that does not parse is asked again up to ``claims_value_retries`` times, the
new prompt naming the error (at temperature 0 the same prompt returns the same answer);
if it still does not parse, the coalition is recorded in ``claims_value.failures.jsonl``
and stays pending (asked again on the next run), never stored as a value. Which
coalitions are scored is lookahead.claims.shapley.plan_for: all 2^n up to
``claims_exact_max`` claims, else the prefixes of ``claims_mc_permutations`` seeded
permutations. One raw line per coalition, keyed by instance, claim list and coalition,
so a coalition is never scored twice, across reruns and kills.

With ``claims_coalition_batch`` above 1 (seed prompt, stated value) the pending
coalitions are asked up to that many a request, the instance's claims listed once and
each coalition naming its claims by ID (the seed's Claim ID Reference System,
llm_jobs.claims_batch); each coalition's line is the one this job writes one coalition a
request, under the same key.
"""

from __future__ import annotations

from typing import Any

from llm_jobs.claims_batch import check_batch, run_batched
from llm_jobs.claims_common import ClaimContext, predictions, run_parsed, value_answer_params
from llm_jobs.queries import Query
from lookahead.claims.inputs import insufficient_rule
from lookahead.claims.prompts import coalition_prompt
from lookahead.claims.shapley import members_of, plan_for
from lookahead.claims.tables import claims_sha, instance_agent_id, instance_claims
from lookahead.errors import StudyConfigError

TASK = "claims_value"


def value_params(ctx: ClaimContext) -> dict[str, Any]:
    """The coalition queries' parameters; the prompt form and value reading are among
    them, so each setting has its own cache keys and lines (the tables read only the
    lines of the study's form)."""
    st = ctx.settings
    return {
        **value_answer_params(ctx),
        "coalition_prompt": st.claims.claims_coalition_prompt,
        "coalition_value": st.claims.claims_coalition_value,
    }


def check_exact(ctx: ClaimContext) -> None:
    """A token-probability value is the label's exact probability: a backend that cannot
    score labels over its whole vocabulary (only transformers can) is refused in one line,
    never read through a censored top-20."""
    if ctx.settings.kind.exact_labels(ctx.settings) and not hasattr(ctx.backend, "label_logprobs"):
        raise StudyConfigError(
            f"setting 'claims_coalition_value': token needs a backend that scores labels exactly (transformers), "
            f"not '{ctx.study.backend.backend}'; use stated"
        )


def plan(ctx: ClaimContext) -> tuple[list[Query], dict[str, dict[str, Any]], dict[str, Any]]:
    st, kind, ks = ctx.settings, ctx.settings.kind, ctx.settings
    params = value_params(ctx)
    form = st.claims.claims_coalition_prompt
    rule_of = insufficient_rule(st)
    queries, meta = [], {}
    skipped: dict[str, int] = {}
    for r, ex in instance_claims(ctx.study, st, predictions(ctx)):
        if ex.status != "ok":
            skipped[ex.status] = skipped.get(ex.status, 0) + 1
            continue
        n = len(ex.claims)
        ikey = instance_agent_id(r["instance_id"], r["agent"])
        p = plan_for(n, ikey, st.claims.claims_exact_max, st.claims.claims_mc_permutations, st.claims.claims_shapley_seed)
        csha = claims_sha(ex.claims)
        items = kind.items(r["prediction"])
        instruction = kind.value_instruction(ks, items)
        rule = rule_of(r["instance_id"], items)[0] if rule_of else None
        all_texts = [c.claim_text for c in ex.claims]
        for mask in p.masks:
            if mask == 0 and rule_of:  # v(empty set) is the kind's default (RULE 2), not asked
                continue
            texts = [ex.claims[i].claim_text for i in members_of(mask, n)]
            text = coalition_prompt(r["task_input"], texts, instruction, rule, form, kind.task_type(ks))
            ident = f"{ikey}|{csha}|{mask}"
            q = ctx.claim_query(TASK, ident, text, params)
            queries.append(q)
            meta[q.key] = {
                "instance_id": r["instance_id"],
                "agent": r["agent"],
                "claims_sha256": csha,
                "mask": mask,
                "n_claims": n,
                "method": p.method,
                "task_kind": kind.name,
                "_text": text,
                "_items": items,
                # what a batched query (claims_coalition_batch) lists: the instance's
                # claims once, its input and RULE 2, and this coalition's claim IDs
                "_group": f"{ikey}|{csha}",
                "_claims": all_texts,
                "_task_input": r["task_input"],
                "_rule": rule,
                "_ids": [i + 1 for i in members_of(mask, n)],
            }
    if skipped:
        print("instances not scored: " + ", ".join(f"{v} {k}" for k, v in sorted(skipped.items())))
    return queries, meta, params


def run(ctx: ClaimContext) -> int:
    check_batch(ctx)
    check_exact(ctx)
    queries, meta, params = plan(ctx)
    if ctx.settings.claims.claims_coalition_batch > 1:  # the seed's Claim ID Reference System
        code = run_batched(ctx, TASK, queries, meta, params)
    else:
        code = run_parsed(ctx, TASK, queries, meta, params, "coalitions", "score")
    print(f"{TASK}: {len(queries)} coalition values planned")
    return code
