"""Claim extraction (seed 002, phase 1): each rationale -> schema-valid atomic claims.

Run alone: ``lookahead jobs --study FILE --only claims_extract --yes`` (else with the study's other jobs)

Temperature 0, the Appendix D prompt. A backend that can constrain its output to the
JSON Schema (``generate_json``: vLLM guided decoding, OpenAI ``response_format``) is
asked to; otherwise the answer is validated after the fact and, when invalid, asked
again up to ``claims_extract_retries`` times with the error named in the prompt (at
temperature 0 the same prompt would give the same answer). Every attempt is one raw
line; the last valid one is used. Instances with a reference extraction
(``claims_extractions_path``) or an empty rationale are skipped, and so is a TimeSPEC
rationale that is only its validated claims' text (its extraction is those claims,
lookahead.claims.tables.assembled_claims); TimeSPEC's written final rationale is
extracted like every agent's.
"""

from __future__ import annotations

from typing import Any

from llm_jobs.claims_common import ClaimContext, claim_record, predictions
from llm_jobs.jobs_plan import say_repaired
from llm_jobs.planning import confirm, print_plan
from llm_jobs.queries import Query
from llm_jobs.query_loop import run_queries
from lookahead.backends.base import json_generation
from lookahead.cache.store import RawStore
from lookahead.claims.inputs import claims_raw_file, load_reference_extractions, sha
from lookahead.claims.prompts import extraction_prompt, extraction_retry_prompt
from lookahead.claims.schema import EXTRACTION_SCHEMA, ExtractionError, parse_extraction_text
from lookahead.claims.tables import assembled_claims, timespec_claims
from lookahead.guard import EXIT_OK

TASK = "claims_extract"


def run(ctx: ClaimContext) -> int:
    st = ctx.settings
    preds = predictions(ctx)
    reference = load_reference_extractions(st)
    ts = timespec_claims(ctx.study)
    todo = [
        r
        for r in preds.to_dict("records")
        if r["rationale"].strip() and (r["instance_id"], r["agent"]) not in reference and assembled_claims(r, ts) is None
    ]
    skipped = len(preds) - len(todo)
    print(
        f"{TASK}: {len(todo)} rationales to extract ({skipped} skipped: empty rationale, reference extraction "
        "or a TimeSPEC rationale made of its validated claims)"
    )
    generate_json = json_generation(ctx.backend)
    structured = generate_json is not None
    params = {
        "temperature": 0,
        "max_tokens": st.claims.claims_extract_max_tokens,
        "top_logprobs": 0,
        "seed": 0,
        "n_samples": None,
        "chat_template": ctx.use_chat_template,
        "structured": structured,
    }
    with RawStore(claims_raw_file(ctx.study, TASK)) as store:
        say_repaired(store)
        prompts0 = {}
        for r in todo:
            prompts0[(r["instance_id"], r["agent"])] = extraction_prompt(
                st.claims.claims_task_description, r["task_input"], r["t_ref"], r["rationale"]
            )
        state: dict[tuple[str, str], tuple[str, str]] = {}  # instance -> (last answer, error)
        n_invalid = 0
        for attempt in range(st.claims.claims_extract_retries + 1):
            queries, meta = [], {}
            for r in todo:
                k = (r["instance_id"], r["agent"])
                if attempt == 0:
                    text = prompts0[k]
                elif k in state:
                    text = extraction_retry_prompt(prompts0[k], *state[k])
                else:
                    continue
                p = {**params, "attempt": attempt}
                ident = f"{r['instance_id']}|{r['agent']}|{sha(r['rationale'])}"
                q = ctx.claim_query(TASK, ident, text, p)
                queries.append(q)
                meta[q.key] = (r, p)
            if not queries:
                break
            pending = [q for q in queries if q.key not in store]
            tokens = st.claims.claims_extract_max_tokens
            print_plan(ctx, f"{TASK} (attempt {attempt})", "rationales", len(queries), pending, tokens)
            if pending:
                confirm(f"query {len(pending)} extractions?", ctx.args.yes, ctx.destination)

                def answer(batch: list[Query]) -> list[dict[str, Any]]:
                    texts = [q.prompt for q in batch]
                    if generate_json is not None:
                        gens = generate_json(texts, st.claims.claims_extract_max_tokens, EXTRACTION_SCHEMA)
                    else:
                        gens = ctx.backend.generate(texts, st.claims.claims_extract_max_tokens, 0)
                    out = []
                    for g in gens:
                        try:
                            claims = [c.as_dict() for c in parse_extraction_text(g.response_text)]
                            out.append({"response_text": g.response_text, "valid": True, "error": None, "claims": claims})
                        except ExtractionError as exc:
                            out.append({"response_text": g.response_text, "valid": False, "error": str(exc), "claims": None})
                    return out

                def base(q: Query) -> dict[str, Any]:
                    r, p = meta[q.key]
                    return claim_record(
                        ctx,
                        TASK,
                        q,
                        p,
                        {
                            "instance_id": r["instance_id"],
                            "agent": r["agent"],
                            "rationale_sha256": sha(r["rationale"]),
                            "attempt": p["attempt"],
                        },
                    )

                run_queries(store, pending, ctx.batch_size, TASK, answer, base)
            records = store.load({q.key for q in queries})
            state = {}
            for q in queries:
                rec = records[q.key]
                r, _ = meta[q.key]
                if not rec.get("valid"):
                    state[(r["instance_id"], r["agent"])] = (rec.get("response_text") or "", rec.get("error") or "")
            n_invalid = len(state)
            print(f"attempt {attempt}: {len(queries) - n_invalid} valid, {n_invalid} invalid")
    print(
        f"extraction: {len(todo) - n_invalid} of {len(todo)} rationales with a schema-valid extraction; "
        f"{n_invalid} failed after {st.claims.claims_extract_retries + 1} attempt(s) (status 'extraction failed')"
    )
    return EXIT_OK
