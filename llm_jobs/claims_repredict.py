"""The re-prediction check (seed 002, Appendix B.1, Table 5): does a prediction follow
from its rationale?

Run alone: ``lookahead jobs --study FILE --only claims_repredict --yes`` (else with the study's other jobs)

For every instance with a rationale (every agent): (1) the rationale is cleaned of its
explicit prediction (lookahead.claims.prompts.clean_rationale with the task kind's
patterns of the predicted label, value or order); (2) the study's claim model is asked,
greedily, for a new prediction from the task input and the cleaned rationale, with the
task kind's answer instruction, and the answer is parsed as a coalition answer is
(classification: P(label) from the top-20 log-probabilities; regression: a number;
ranking: exactly the instance's items). An unparseable answer is asked again up to
``claims_value_retries`` times with the error named, then recorded as a failure and
left pending, never stored. One raw line per instance, keyed by instance, agent and the
cleaned rationale, so a rerun (or a run after kill -9) asks nothing twice.
lookahead.claims.tables turns the lines into the table ``claims_repredict``: per
instance the relative error of the re-predicted probability or value (Eq. 12) or the
relative Kendall distance of the rankings (Eq. 13), and per agent their mean.
"""

from __future__ import annotations

from typing import Any

from llm_jobs.claims_common import ClaimContext, predictions, run_parsed, value_answer_params
from llm_jobs.queries import Query
from lookahead.claims.inputs import sha
from lookahead.claims.prompts import clean_rationale, repredict_prompt

TASK = "claims_repredict"


def plan(ctx: ClaimContext) -> tuple[list[Query], dict[str, dict[str, Any]], dict[str, Any]]:
    kind, ks = ctx.settings.kind, ctx.settings
    params = value_answer_params(ctx)
    queries, meta = [], {}
    for r in predictions(ctx).to_dict("records"):
        if not str(r["rationale"]).strip():
            continue
        cleaned = clean_rationale(r["rationale"], kind.mentions(r["prediction"]))
        items = kind.items(r["prediction"])
        text = repredict_prompt(r["task_input"], cleaned, kind.value_instruction(ks, items))
        ident = f"{r['instance_id']}|{r['agent']}|{sha(cleaned)}"
        q = ctx.claim_query(TASK, ident, text, params)
        queries.append(q)
        meta[q.key] = {
            "instance_id": r["instance_id"],
            "agent": r["agent"],
            "task_kind": kind.name,
            "rationale_sha256": sha(r["rationale"]),
            "cleaned_rationale": cleaned,
            "_text": text,
            "_items": items,
        }
    return queries, meta, params


def run(ctx: ClaimContext) -> int:
    queries, meta, params = plan(ctx)
    code = run_parsed(ctx, TASK, queries, meta, params, "instances", "re-predict")
    print(f"{TASK}: {len(queries)} re-predictions planned")
    return code
