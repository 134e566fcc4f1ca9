"""Agent rationales for the claim pipeline: the seed's Superforecasting agent and its
Temporal Hint variant (seed 002, sections 6.2 and Appendix D.2).

Run alone: ``lookahead jobs --study FILE --only 'claims_rationale (superforecasting)' --yes`` (an entry
per agent in llm_jobs.registry)

One greedy answer per instance of ``claims_instances_path``: 'Rationale: ...' then
'Prediction: <the task kind's prediction>' (a label, a number, or the items best to
worst). The parsed prediction and rationale are stored on the raw line (``final:
true``), and lookahead.claims.inputs reads them as predictions next to the user's file.
An answer that does not fit the seed's schema (Appendix D.1: no parseable prediction,
or a rationale shorter than ``claims_rationale_min_chars``) is kept with its ``error``
and counted as a reject, never guessed; a rerun does not ask it again (the answer is
the model's, at temperature 0).
"""

from __future__ import annotations

from typing import Any

from llm_jobs.claims_common import ClaimContext, claim_record
from llm_jobs.jobs_plan import say_repaired
from llm_jobs.planning import confirm, print_plan
from llm_jobs.queries import Query
from llm_jobs.query_loop import run_queries
from lookahead.cache.store import RawStore
from lookahead.claims.inputs import claims_raw_file, load_instances
from lookahead.claims.prompts import rationale_prompt
from lookahead.claims.rationale_parse import parse_agent_answer
from lookahead.guard import EXIT_OK

TASK = "claims_rationale"


def run_agent(ctx: ClaimContext, agent: str) -> int:
    """``agent``'s rationale and prediction for every task instance (llm_jobs.registry
    has an entry per agent)."""
    st = ctx.settings
    insts = load_instances(st)
    params = {
        "temperature": 0,
        "max_tokens": st.claims.claims_rationale_max_tokens,
        "top_logprobs": 0,
        "seed": 0,
        "n_samples": None,
        "chat_template": ctx.use_chat_template,
        "agent": agent,
    }
    queries, meta = [], {}
    for r in insts.to_dict("records"):
        text = rationale_prompt(agent, r["task_input"], r["t_ref"], st.kind.prediction_format(st))
        ident = f"{r['instance_id']}|{agent}"
        q = ctx.claim_query(TASK, ident, text, params)
        queries.append(q)
        meta[q.key] = {
            "instance_id": r["instance_id"],
            "agent": agent,
            "entity": r["entity"],
            "task_name": r["task"],
            "t_ref": r["t_ref"],
            "task_input": r["task_input"],
            "outcome": r["outcome"],
            "final": True,
        }
    with RawStore(claims_raw_file(ctx.study, TASK)) as store:
        say_repaired(store)
        pending = [q for q in queries if q.key not in store]
        print_plan(ctx, f"{TASK} ({agent})", "instances", len(queries), pending, st.claims.claims_rationale_max_tokens)
        if pending:
            confirm(f"query {len(pending)} rationales?", ctx.args.yes, ctx.destination)

            def answer(batch: list[Query]) -> list[dict[str, Any]]:
                gens = ctx.backend.generate([q.prompt for q in batch], st.claims.claims_rationale_max_tokens, 0)
                out = []
                for g in gens:
                    pred, rationale, err = parse_agent_answer(g.response_text, st)
                    out.append({"response_text": g.response_text, "prediction": pred, "rationale": rationale, "error": err})
                return out

            run_queries(store, pending, ctx.batch_size, TASK, answer, lambda q: claim_record(ctx, TASK, q, params, meta[q.key]))
        recs = store.load({q.key for q in queries})
    n_pred = sum(1 for r in recs.values() if r.get("prediction"))
    print(f"{TASK} ({agent}): {n_pred} of {len(queries)} answers fit the task's schema (prediction and rationale)")
    return EXIT_OK
