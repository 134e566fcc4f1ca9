"""Support judgments for the dating of A1-A3 claims (seed 002, phase 3).

Run alone: ``lookahead jobs --study FILE --only claims_support --yes`` (else with the study's other jobs)

Stands in for the seed's web search and date extraction: the BM25 candidates of each
A1-A3 claim in the user's dated corpus (lookahead.claims.retrieval) are each judged by
the model ("does this document state the claim? yes/no", greedy, top-20 log-probs;
supports = P(yes) > P(no)). tau(c) is then the earliest published_at among supporting
documents (lookahead.claims.dating). With ``claims_support_judge: contains`` no model
is asked (the claim text must appear in the document) and this job has nothing to do.
"""

from __future__ import annotations

from typing import Any

from llm_jobs.claims_common import ClaimContext, claim_record, predictions
from llm_jobs.jobs_plan import say_repaired
from llm_jobs.planning import confirm, print_plan
from llm_jobs.queries import Query
from llm_jobs.query_loop import logprob_dicts, run_queries
from lookahead.cache.store import RawStore
from lookahead.claims.inputs import claims_raw_file, load_corpus
from lookahead.claims.prompts import support_prompt
from lookahead.claims.retrieval import bm25
from lookahead.claims.tables import candidate_queries, instance_agent_id, instance_claims
from lookahead.guard import EXIT_OK
from lookahead.scoring import label_probability

TASK = "claims_support"
TOP_LOGPROBS = 20


def run(ctx: ClaimContext) -> int:
    st = ctx.settings
    if st.claims.claims_support_judge != "llm":
        print(f"{TASK}: claims_support_judge is '{st.claims.claims_support_judge}': no model judgments needed")
        return EXIT_OK
    corpus, rejects = load_corpus(st)
    for r in rejects:
        print(f"corpus row {r['row']} column {r['column']}: {r['reason']} (skipped)")
    if corpus.empty:
        print(f"{TASK}: empty corpus: A1-A3 claims are dated by their temporal reference alone")
        return EXIT_OK
    items = [
        (instance_agent_id(r["instance_id"], r["agent"]), c)
        for r, ex in instance_claims(ctx.study, st, predictions(ctx))
        for c in ex.claims
    ]
    qdf = candidate_queries(items)
    cands = bm25(qdf, corpus, st.claims.claims_bm25_k)
    texts = dict(zip(qdf["query_id"], qdf["query_text"], strict=False))
    docs = corpus.set_index("doc_id")
    params = {
        "temperature": 0,
        "max_tokens": 1,
        "top_logprobs": TOP_LOGPROBS,
        "seed": 0,
        "n_samples": None,
        "chat_template": ctx.use_chat_template,
    }
    queries, meta = [], {}
    for c in cands.itertuples():
        d = docs.loc[c.doc_id]
        text = support_prompt(texts[c.query_id], d["title"], d["body"], str(d["published_at"]))
        ident = f"{c.query_id}|{c.doc_id}"
        q = ctx.claim_query(TASK, ident, text, params)
        queries.append(q)
        meta[q.key] = {"claim_sha256": c.query_id, "doc_id": c.doc_id, "bm25_rank": int(c.rank), "bm25_score": float(c.score)}
    with RawStore(claims_raw_file(ctx.study, TASK)) as store:
        say_repaired(store)
        pending = [q for q in queries if q.key not in store]
        print_plan(ctx, TASK, f"candidates ({len(qdf)} A1-A3 claims, top {st.claims.claims_bm25_k})", len(queries), pending, 1)
        if pending:
            confirm(f"judge {len(pending)} candidates?", ctx.args.yes, ctx.destination)

            def answer(batch: list[Query]) -> list[dict[str, Any]]:
                gens = ctx.backend.generate([q.prompt for q in batch], 1, TOP_LOGPROBS)
                out = []
                for g in gens:
                    top = logprob_dicts(g.top_logprobs)
                    p_yes, p_no = label_probability(top, "yes"), label_probability(top, "no")
                    out.append(
                        {
                            "response_text": g.response_text,
                            "top_logprobs": top,
                            "p_yes": p_yes,
                            "p_no": p_no,
                            "supports": (p_yes or 0.0) > (p_no or 0.0),
                        }
                    )
                return out

            run_queries(store, pending, ctx.batch_size, TASK, answer, lambda q: claim_record(ctx, TASK, q, params, meta[q.key]))
    return EXIT_OK
