"""Coalition values v(S) for the Shapley values (seed 002, phase 2).

Run: ``python -m llm_jobs.claims_value --study FILE --yes``

v(S) is the model's probability of the instance's own prediction given the task input
and only the claims in S (lookahead.claims.prompts.coalition_prompt): one greedy step
with the top-20 log-probabilities, P(label) by the protocol rule
(lookahead.scoring.label_probability). A label outside the top 20 has an unknown,
small probability; it is stored as 0 with ``censored: true``. Which coalitions are
scored is lookahead.claims.shapley.plan_for: all 2^n up to ``claims_exact_max`` claims,
else the prefixes of ``claims_mc_permutations`` seeded permutations. One raw line per
coalition, keyed by instance, claim list and coalition, so a coalition is never scored
twice, across reruns and kills.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from llm_jobs.claims_common import ClaimContext, claim_main, claim_record, predictions
from llm_jobs.common import EXIT_OK, Query, confirm, logprob_dicts, print_plan, run_queries
from lookahead.cache import RawStore, query_key
from lookahead.claims.inputs import claims_raw_file
from lookahead.claims.prompts import coalition_prompt
from lookahead.claims.shapley import members_of, plan_for
from lookahead.claims.tables import claims_sha, instance_claims, instance_key
from lookahead.scoring import label_probability

TASK = "claims_value"
TOP_LOGPROBS = 20


def plan(ctx: ClaimContext) -> tuple[list[Query], dict[str, dict[str, Any]], dict[str, Any]]:
    st = ctx.settings
    params = {"temperature": 0, "max_tokens": 1, "top_logprobs": TOP_LOGPROBS, "seed": 0, "n_samples": None,
              "chat_template": ctx.use_chat_template, "labels": list(st.labels)}
    queries, meta = [], {}
    skipped: dict[str, int] = {}
    for r, ex in instance_claims(ctx.study, st, predictions(ctx)):
        if ex.status != "ok":
            skipped[ex.status] = skipped.get(ex.status, 0) + 1
            continue
        n = len(ex.claims)
        ikey = instance_key(r["instance_id"], r["agent"])
        p = plan_for(n, ikey, st.exact_max, st.mc_permutations, st.shapley_seed)
        csha = claims_sha(ex.claims)
        for mask in p.masks:
            texts = [ex.claims[i].claim_text for i in members_of(mask, n)]
            prompt = ctx.backend.render_prompt(coalition_prompt(r["task_input"], texts, st.labels),
                                               ctx.use_chat_template)
            ident = f"{ikey}|{csha}|{mask}|{r['prediction']}"
            q = Query(query_key(TASK, ctx.study["model_id"], ident, prompt, params), prompt, row_id=ident)
            queries.append(q)
            meta[q.key] = {"instance_id": r["instance_id"], "agent": r["agent"], "claims_sha256": csha,
                           "mask": mask, "n_claims": n, "label": r["prediction"], "method": p.method}
    if skipped:
        print("instances not scored: " + ", ".join(f"{v} {k}" for k, v in sorted(skipped.items())))
    return queries, meta, params


def run(ctx: ClaimContext) -> int:
    queries, meta, params = plan(ctx)
    with RawStore(claims_raw_file(ctx.study, TASK)) as store:
        if store.repaired_bytes:
            print(f"repaired a torn last line in {store.path} ({store.repaired_bytes} bytes moved aside)")
        pending = [q for q in queries if q.key not in store]
        print_plan(ctx, TASK, "coalitions", len(queries), pending, 1)
        if pending:
            confirm(f"score {len(pending)} coalitions?", ctx.args.yes)

            def answer(batch: list[Query]) -> list[dict[str, Any]]:
                gens = ctx.backend.generate([q.prompt for q in batch], 1, TOP_LOGPROBS)
                out = []
                for q, g in zip(batch, gens):
                    top = logprob_dicts(g.top_logprobs)
                    p = label_probability(top, meta[q.key]["label"])
                    out.append({"response_text": g.response_text, "top_logprobs": top,
                                "value": 0.0 if p is None else p, "censored": p is None})
                return out

            run_queries(store, pending, ctx.batch_size, TASK, answer,
                        lambda q: claim_record(ctx, TASK, q, params, meta[q.key]))
    print(f"{TASK}: {len(queries)} coalition values available")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    return claim_main(run, "Coalition values v(S) for claim Shapley values (seed 002 phase 2).", argv)


if __name__ == "__main__":
    sys.exit(main())
