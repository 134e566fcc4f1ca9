"""TimeSPEC, the seed's five-phase agent (seed 002, section 5 and Appendix A.2/D.2).

Run alone: ``lookahead jobs --study FILE --only claims_timespec --yes`` (else with the study's other jobs)

1. Generator: BM25 over the corpus keeping only documents published BEFORE t_ref (the
   seed's temporally filtered search), then a draft rationale and prediction from the
   task input and those documents. With ``claims_timespec_draft: predictions`` the draft
   is instead the rationale of the instance in the predictions file (a model that cannot
   write text, like the demo's, is then still checked and aggregated).
2. Supervisor: claims of the draft (extraction prompt, schema-validated; a reference
   extraction when the draft is a predictions rationale that has one), each dated by Eq. 3.
   Valid claims are those not leaked AND verified (not_leaked); a leaked claim is a
   violation; an unverifiable claim is neither (it is not passed on: TimeSPEC keeps only
   claims traced to sources before the cutoff).
3. Regenerator, only when a violation exists (one regeneration, as the seed's
   max iterations = 1): a new draft from the validated claims and the pre-t_ref
   documents. In ``predictions`` mode no new text can be written, so the regenerated
   draft is the validated claims themselves.
4. Resupervisor: phase 2 on the regenerated draft.
5. Aggregator: closed world: the task input and the validated claims of phases 2 and 4
   only. With ``generate`` it is the seed's Aggregator Prompt (each claim with its
   category and verified date, lookahead.claims.prompts.synthesis_prompt): the model
   writes the final rationale and prediction, parsed and checked against the task's
   schema like every agent's answer. With ``predictions`` the model cannot write text:
   the coalition prompt over the validated claims gives the prediction (the label with
   the higher first-token probability, or the parsed value or ranking) and the final
   rationale is the validated claims' text.

Every model call is one raw line in <raw_dir>/claims_timespec.jsonl (phase in params);
the final line per instance (``final: true``) carries the prediction and the final
rationale, which the claim pipeline extracts, dates and values like every agent's (seed
002 scores each agent's final rationale the same way, Table 4). The validated claims
the aggregator saw are on the line as ``validated_claims``. Where the final rationale
is only the validated claims' text (``predictions``), the line also carries them as
``claims``: they are that text's extraction (lookahead.claims.tables.assembled_claims),
so a model that cannot extract still gets its TimeSPEC scored; dating and valuation
are the same as every agent's. Support judgments with ``claims_support_judge: llm`` come from
<raw_dir>/claims_support.jsonl (the claims_support job, after this one in a run, asks any missing).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

from llm_jobs.claims_common import ClaimContext, ask_parsed, claim_record
from llm_jobs.jobs_plan import say_repaired
from llm_jobs.planning import confirm, print_plan
from llm_jobs.queries import Query
from llm_jobs.query_loop import logprob_dicts, run_queries
from lookahead.backends.base import json_generation
from lookahead.cache.store import RawStore
from lookahead.claims.inputs import (
    claims_raw_file,
    insufficient_rule,
    load_corpus,
    load_instances,
    load_predictions,
    load_reference_extractions,
    sha,
)
from lookahead.claims.prompts import aggregator_prompt, extraction_prompt, rationale_prompt, synthesis_prompt
from lookahead.claims.rationale_parse import parse_agent_answer
from lookahead.claims.retrieval import bm25
from lookahead.claims.schema import EXTRACTION_SCHEMA, Claim, ExtractionError, claims_from_object, parse_extraction_text
from lookahead.claims.tables import Dater, support_lines
from lookahead.config import StudyConfigError
from lookahead.guard import EXIT_OK
from lookahead.keys import query_key

TASK = "claims_timespec"
AGENT = "timespec"
EVIDENCE_K = 5


class Phases:
    """Runs one phase's model calls for all instances through the cache."""

    def __init__(self, ctx: ClaimContext, store: RawStore) -> None:
        self.ctx, self.store = ctx, store

    def ask(
        self,
        phase: str,
        items: dict[str, str],
        max_tokens: int,
        top: int = 0,
        schema: dict[str, Any] | None = None,
        parse: dict[str, list[str] | None] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """instance_id -> raw record of the answer to items[instance_id] (a user text);
        with ``schema``, constrained to it when the backend can (generate_json); with
        ``parse`` (instance_id -> a ranking's items), each answer parsed as the task kind's
        coalition answer, re-asked when it does not parse, else a recorded failure
        (llm_jobs.claims_common.ask_parsed)."""
        ctx = self.ctx
        generate_json = json_generation(ctx.backend)
        structured = schema is not None and generate_json is not None
        params = {
            "temperature": 0,
            "max_tokens": max_tokens,
            "top_logprobs": top,
            "seed": 0,
            "n_samples": None,
            "chat_template": ctx.use_chat_template,
            "phase": phase,
            "structured": structured,
        }
        queries, ids = [], {}
        for iid, text in items.items():
            ident = f"{iid}|{AGENT}|{phase}"
            q = ctx.claim_query(TASK, ident, text, params)
            queries.append(q)
            ids[q.key] = iid
        pending = [q for q in queries if q.key not in self.store]
        print_plan(ctx, f"{TASK} {phase}", "instances", len(queries), pending, max_tokens)
        if pending:
            confirm(f"query {len(pending)} {phase} answers?", ctx.args.yes, ctx.destination)

            def answer(batch: list[Query]) -> list[Any]:
                if parse is not None:
                    return ask_parsed(ctx, batch, [items[ids[q.key]] for q in batch], [parse[ids[q.key]] for q in batch], params)
                if schema is not None and generate_json is not None:  # structured
                    gens = generate_json([q.prompt for q in batch], max_tokens, schema)
                else:
                    gens = ctx.backend.generate([q.prompt for q in batch], max_tokens, top)
                return [{"response_text": g.response_text, "top_logprobs": logprob_dicts(g.top_logprobs)} for g in gens]

            run_queries(
                self.store,
                pending,
                ctx.batch_size,
                f"{TASK} {phase}",
                answer,
                lambda q: claim_record(ctx, TASK, q, params, {"instance_id": ids[q.key], "agent": AGENT, "final": False}),
            )
        recs = self.store.load({q.key for q in queries})
        return {ids[k]: r for k, r in recs.items()}


def run(ctx: ClaimContext) -> int:
    st = ctx.settings
    kind, ks = st.kind, st
    fmt = kind.prediction_format(ks)
    mode = ctx.study.claims.claims_timespec_draft or "generate"
    if mode not in ("generate", "predictions"):
        raise StudyConfigError(f"setting 'claims_timespec_draft': '{mode}' is not one of generate, predictions")
    insts = load_instances(st)
    corpus, _ = load_corpus(st)
    rows = {r["instance_id"]: r for r in insts.to_dict("records")}
    t_refs = {i: dt.date.fromisoformat(r["t_ref"]) for i, r in rows.items()}
    judged = support_lines(ctx.study) if st.claims.claims_support_judge == "llm" else {}

    # pre-t_ref evidence for the generator and regenerator
    q = pd.DataFrame(
        {
            "query_id": list(rows),
            "query_text": [r["task_input"] for r in rows.values()],
            "before": [r["t_ref"] for r in rows.values()],
        }
    )
    ev = bm25(q, corpus, EVIDENCE_K)
    evidence = (
        {
            i: [f"({d.published_at}) {corpus.set_index('doc_id').loc[d.doc_id, 'body']}" for d in g.itertuples()]
            for i, g in ev.groupby("query_id")
        }
        if not ev.empty
        else {}
    )

    with RawStore(claims_raw_file(ctx.study, TASK)) as store:
        say_repaired(store)
        ph = Phases(ctx, store)
        # ---- phase 1: draft
        drafts: dict[str, str] = {}
        draft_pred: dict[str, str | None] = {}  # a ranking's items come from its draft prediction
        ref_claims: dict[str, list[Claim]] = {}
        if mode == "generate":
            recs = ph.ask(
                "generator",
                {i: rationale_prompt(AGENT, r["task_input"], r["t_ref"], fmt, evidence.get(i, [])) for i, r in rows.items()},
                st.claims.claims_rationale_max_tokens,
            )
            for i, rec in recs.items():
                draft_pred[i], drafts[i], _ = kind.agent_prediction(rec["response_text"], ks)
        else:
            preds, _ = load_predictions(ctx.study, st)
            reference = load_reference_extractions(st)
            for p in preds[preds["agent"] != AGENT].to_dict("records"):
                if p["instance_id"] in rows and p["instance_id"] not in drafts:
                    drafts[p["instance_id"]] = p["rationale"]
                    draft_pred[p["instance_id"]] = p["prediction"]
                    if (p["instance_id"], p["agent"]) in reference:
                        ref_claims[p["instance_id"]] = claims_from_object(reference[(p["instance_id"], p["agent"])])

        verified: dict[str, str] = {}  # a validated claim's text -> the date a document verified it

        def supervise(
            phase: str, texts: dict[str, str], given: dict[str, list[Claim]]
        ) -> dict[str, tuple[list[Claim], list[Claim]]]:
            """instance -> (valid claims, violated claims) of each draft."""
            claims: dict[str, list[Claim]] = dict(given)
            need = {
                i: extraction_prompt(st.claims.claims_task_description, rows[i]["task_input"], rows[i]["t_ref"], t)
                for i, t in texts.items()
                if i not in given and t.strip()
            }
            if need:
                for i, rec in ph.ask(phase, need, st.claims.claims_extract_max_tokens, schema=EXTRACTION_SCHEMA).items():
                    try:
                        claims[i] = parse_extraction_text(rec["response_text"])
                    except ExtractionError as exc:
                        print(f"instance {i}: {phase} extraction invalid ({exc}); no claims kept from this draft")
                        claims[i] = []
            dater = Dater(corpus, st, [c for cs in claims.values() for c in cs], judged)
            out = {}
            for i in texts:
                valid: list[Claim] = []
                bad: list[Claim] = []
                for c in claims.get(i, []):
                    lk = dater.date(c, t_refs[i])[0]
                    (valid if lk.state == "not_leaked" else bad if lk.state == "leaked" else []).append(c)
                    if lk.state == "not_leaked" and lk.tau is not None:
                        verified[c.claim_text] = lk.tau.isoformat()
                out[i] = (valid, bad)
            return out

        # ---- phase 2: supervisor
        first = supervise("supervisor", drafts, ref_claims)
        violators = [i for i, (_, bad) in first.items() if bad]
        print(f"supervisor: {len(violators)} of {len(first)} drafts violate t_ref -> regenerate")
        # ---- phase 3: regenerator (once) and phase 4: resupervisor
        second: dict[str, tuple[list[Claim], list[Claim]]] = {}
        if violators:
            if mode == "generate":
                recs = ph.ask(
                    "regenerator",
                    {
                        i: rationale_prompt(
                            AGENT,
                            rows[i]["task_input"],
                            rows[i]["t_ref"],
                            fmt,
                            [c.claim_text for c in first[i][0]] + evidence.get(i, []),
                        )
                        for i in violators
                    },
                    st.claims.claims_rationale_max_tokens,
                )
                regen = {i: st.kind.agent_prediction(rec["response_text"], st)[1] for i, rec in recs.items()}
                second = supervise("resupervisor", regen, {})
            else:
                regen = {i: " ".join(c.claim_text for c in first[i][0]) for i in violators}
                second = supervise("resupervisor", regen, {i: first[i][0] for i in violators})
        # ---- phase 5: aggregator over C_valid(1) | C_valid(2)
        valid: dict[str, list[Claim]] = {}
        for i in rows:
            seen, keep = set(), []
            for c in first.get(i, ([], []))[0] + second.get(i, ([], []))[0]:
                if c.claim_text not in seen:
                    seen.add(c.claim_text)
                    keep.append(c)
            valid[i] = keep
        # with text the seed's aggregator writes the final rationale; without, the coalition prompt answers
        finals = synthesize(ph, ctx, rows, valid, verified) if mode == "generate" else aggregate(ph, ctx, rows, valid, draft_pred)
        params = {"phase": "final", "draft": mode, "rationale": "final"}  # "rationale": lines scored by extraction
        for i, (pred, p, rationale, err, key) in finals.items():
            validated = [{**c.as_dict(), "claim_id": k} for k, c in enumerate(valid[i], 1)]
            final = {
                "instance_id": i,
                "agent": AGENT,
                "entity": rows[i]["entity"],
                "task_name": rows[i]["task"],
                "t_ref": rows[i]["t_ref"],
                "task_input": rows[i]["task_input"],
                "outcome": rows[i]["outcome"],
                "prediction": pred,
                "probability": p,
                "rationale": rationale,
                "error": err,
                "validated_claims": validated,
                # the final rationale's extraction when it is the validated claims' text
                "claims": validated if mode == "predictions" else None,
                "final": True,
                "aggregator_key": key,
            }
            ident = f"{i}|{AGENT}|final|{sha(str(validated))}|{key}"
            q = Query(query_key(TASK, ctx.study.backend.model_id, ident, "", params), "", row_id=ident)
            if q.key not in store:
                r = claim_record(ctx, TASK, q, params, final)
                r["response_text"] = pred
                store.append(r)
    print(f"{TASK}: {len(finals)} final predictions")
    return EXIT_OK


#: One instance's final answer: prediction, probability of the target class or None,
#: final rationale, the schema error or None, and the aggregator answer's cache key.
Final = tuple[str | None, float | None, str, str | None, str]


def synthesize(
    ph: Phases, ctx: ClaimContext, rows: dict[str, dict[str, Any]], valid: dict[str, list[Claim]], verified: dict[str, str]
) -> dict[str, Final]:
    """Phase 5 with text (``generate``): the seed's aggregator writes the final rationale
    and prediction from the task input and the validated claims; the answer must fit the
    task's schema as every agent's must (lookahead.claims.rationale_parse), else the line
    keeps its error and becomes a reject, never a guessed prediction."""
    st = ctx.settings
    fmt = st.kind.prediction_format(st)
    recs = ph.ask(
        "aggregator",
        {
            i: synthesis_prompt(
                r["task_input"], r["t_ref"], [(c.category, c.claim_text, verified.get(c.claim_text)) for c in valid[i]], fmt
            )
            for i, r in rows.items()
        },
        st.claims.claims_rationale_max_tokens,
    )
    out: dict[str, Final] = {}
    for i, rec in recs.items():
        pred, rationale, err = parse_agent_answer(rec["response_text"], st)
        out[i] = (pred, None, rationale, err, rec["key"])
    return out


def aggregate(
    ph: Phases,
    ctx: ClaimContext,
    rows: dict[str, dict[str, Any]],
    valid: dict[str, list[Claim]],
    draft_pred: dict[str, str | None],
) -> dict[str, Final]:
    """Phase 5 without text (``predictions``): the coalition prompt over the validated
    claims gives the prediction, read as v(S) is; the final rationale is the validated
    claims' text. A ranking is over its draft's items (an instance whose draft has none
    is not aggregated)."""
    st = ctx.settings
    kind = st.kind
    items = {i: kind.items(pred) if (pred := draft_pred.get(i)) else None for i in rows}
    agg = [i for i in rows if not kind.items_needed or items[i]]
    if len(agg) < len(rows):
        print(f"aggregator: {len(rows) - len(agg)} instance(s) without a draft ranking to take the items from")
    top = kind.value_top_logprobs(st)
    rule_of = insufficient_rule(st)
    recs = ph.ask(
        "aggregator",
        {
            i: aggregator_prompt(
                rows[i]["task_input"],
                [c.claim_text for c in valid[i]],
                kind.value_instruction(st, items[i]),
                rule_of(i, items[i])[0] if rule_of else None,
                st.claims.claims_coalition_prompt,
                kind.task_type(st),
            )
            for i in agg
        },
        1 if top else st.claims.claims_value_max_tokens,
        top,
        parse=items,
    )
    out: dict[str, Final] = {}
    for i, rec in recs.items():
        parsed = kind.stored_answer(rec, st, items[i])
        pred, p = kind.final_prediction(parsed, st)
        out[i] = (pred, p, " ".join(c.claim_text for c in valid[i]), None, rec["key"])
    return out
