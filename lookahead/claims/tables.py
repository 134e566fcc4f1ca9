"""The claim-level tables, built from the inputs and the raw JSONL of the claim jobs.

This is the whole deterministic side of the pipeline (the dbt Python models ``claims``,
``instance_leakage``, ``claims_summary`` and ``claims_rejects`` only call ``build``):
extracted claims -> BM25 candidates and support -> tau and leakage state (Eq. 3) ->
coalition values -> Shapley values (Eq. 2) -> OLR, Shapley-DCLR, top-k (Eqs. 9, 10, 14)
-> per agent and task with the Brier score (Eq. 6).

Raw lines are matched on content, not on cache keys: an extraction on the instance's
rationale text (sha256), a support judgment on the claim text and document, a
coalition value on the instance, claim list, coalition and predicted label, all for
the study's model_id. A changed rationale or claim list therefore never reuses an old
line, and lines of other models in the same folder are ignored.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from lookahead.cache.files import iter_records
from lookahead.claims import metrics
from lookahead.claims.dating import claim_leakage, parse_period
from lookahead.claims.inputs import (
    REJECT_COLUMNS,
    ClaimsResolved,
    agent_frame,
    claim_study,
    claims_raw_file,
    insufficient_values,
    load_corpus,
    load_predictions,
    load_reference_extractions,
    sha,
)
from lookahead.claims.retrieval import bm25
from lookahead.claims.schema import Claim, ExtractionError, claims_from_object
from lookahead.claims.shapley import lookup_masks, plan_for, shapley_values
from lookahead.claims.tasks import PredictionError
from lookahead.config import Study

INSTANCE_STATUSES = ("ok", "empty rationale", "extraction pending", "extraction failed", "no claims", "values pending")
CLAIM_COLUMNS = [
    "instance_id",
    "agent",
    "task_kind",
    "claim_id",
    "claim_text",
    "original_text",
    "category",
    "temporal_reference",
    "temporal_reference_parsed",
    "category_reasoning",
    "t_ref",
    "tau",
    "leakage_state",
    "leakage_reason",
    "n_candidates",
    "n_supporting_docs",
    "shapley",
    "shapley_se",
]
INSTANCE_COLUMNS = [
    "instance_id",
    "agent",
    "task",
    "task_kind",
    "entity",
    "t_ref",
    "status",
    "n_claims",
    "olr",
    "olr_unverifiable_leaked",
    "shapley_dclr",
    "shapley_dclr_unverifiable_leaked",
    "shapley_dclr_se",
    "shapley_dclr_ci_low",
    "shapley_dclr_ci_high",
    "top1_leakage",
    "top3_leakage",
    "top5_leakage",
    "top1_leakage_unverifiable_leaked",
    "top3_leakage_unverifiable_leaked",
    "top5_leakage_unverifiable_leaked",
    "v_all",
    "v_empty",
    "shapley_sum",
    "efficiency_gap",
    "shapley_method",
    "max_shapley_se",
    "n_coalitions",
    "value_label",
    "prediction",
    "outcome",
    "p_positive",
    "task_metric_name",
    "task_metric",
]
# The summary means that carry a standard error and 95% interval across instances.
SUMMARY_INTERVAL_COLUMNS = ("olr", "shapley_dclr", "top1_leakage", "top3_leakage", "top5_leakage")
SUMMARY_COLUMNS = [
    "agent",
    "task",
    "task_kind",
    "n_instances",
    "n_scored",
    "n_claims",
    "olr",
    "olr_unverifiable_leaked",
    "shapley_dclr",
    "shapley_dclr_unverifiable_leaked",
    "top1_leakage",
    "top3_leakage",
    "top5_leakage",
    *[f"{col}_{part}" for col in SUMMARY_INTERVAL_COLUMNS for part in ("se", "ci_low", "ci_high")],
    "task_metric_name",
    "task_metric",
    "brier",
    "accuracy",
    "n_outcomes",
    "repred_metric_name",
    "repred_error",
    "n_repredicted",
]
REPRED_COLUMNS = [
    "instance_id",
    "agent",
    "task",
    "task_kind",
    "prediction",
    "original_probability",
    "repredicted",
    "repredicted_probability",
    "repred_metric_name",
    "repred_error",
    "attempts",
]


def normalize(text: str) -> str:
    """Lower-case alphanumerics separated by single spaces (for the 'contains' judge)."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.findall(r"[a-z0-9]+", text))


def instance_key(instance_id: str, agent: str) -> str:
    return f"{instance_id}|{agent}"


def claims_sha(claims: list[Claim]) -> str:
    return sha("\n".join(c.claim_text for c in claims))


# ------------------------------------------------------------------ extraction lookup


def extraction_lines(study: Study) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(instance_id, agent, rationale sha) -> the last extraction line of this model
    (a later attempt after an invalid answer supersedes the earlier one)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rec in iter_records(claims_raw_file(study, "claims_extract")):
        if rec.get("model_id") != study.backend.model_id:
            continue
        k = (rec["instance_id"], rec["agent"], rec["rationale_sha256"])
        prev = out.get(k)
        if prev is None or rec.get("valid") or not prev.get("valid"):
            if prev is not None and prev.get("valid") and not rec.get("valid"):
                continue
            out[k] = rec
    return out


def timespec_claims(study: Study) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """TimeSPEC's final lines carry their validated claims (already extracted and checked)."""
    out = {}
    for rec in iter_records(claims_raw_file(study, "claims_timespec")):
        if rec.get("model_id") == study.backend.model_id and rec.get("final"):
            out[(rec["instance_id"], rec["agent"])] = rec["claims"]
    return out


@dataclass
class Extraction:
    status: str  # ok | empty rationale | extraction pending | extraction failed
    claims: list[Claim] = field(default_factory=list)
    reason: str | None = None


def extraction_for(row: dict[str, Any], reference: dict, lines: dict, ts: dict) -> Extraction:
    """Where an instance's claims come from, in order: TimeSPEC's own validated claims,
    the user's reference extractions, the extraction job's lines."""
    key = (row["instance_id"], row["agent"])
    obj = None
    if key in ts:
        obj = {"claims": ts[key]}
    elif key in reference:
        obj = reference[key]
    if obj is not None:
        try:
            return Extraction("ok", claims_from_object(obj))
        except ExtractionError as exc:
            return Extraction("extraction failed", reason=f"reference extraction invalid: {exc}")
    if not row["rationale"].strip():
        return Extraction("empty rationale", reason="empty rationale: nothing to extract")
    rec = lines.get((row["instance_id"], row["agent"], sha(row["rationale"])))
    if rec is None:
        return Extraction("extraction pending", reason="no extraction line yet (run llm_jobs.claims_extract)")
    if not rec.get("valid"):
        return Extraction(
            "extraction failed", reason=f"no valid extraction after {rec.get('attempt', 0) + 1} attempt(s): {rec.get('error')}"
        )
    try:
        return Extraction("ok", claims_from_object({"claims": rec["claims"]}))
    except ExtractionError as exc:  # a stored line that no longer validates
        return Extraction("extraction failed", reason=f"stored extraction invalid: {exc}")


def instance_claims(
    study: Study, st: ClaimsResolved, preds: pd.DataFrame, lines: ClaimLines | None = None
) -> list[tuple[dict[str, Any], Extraction]]:
    """Every instance with its extraction, as the jobs after extraction see them (the
    claim jobs' raw files, else the staged ``lines`` of a build)."""
    reference = load_reference_extractions(st)
    lines = lines or ClaimLines.from_files(study)
    rows = preds.to_dict("records")
    extractions, ts = lines.extractions, lines.timespec
    return [(r, extraction_for(r, reference, extractions, ts)) for r in rows]


# ------------------------------------------------------------------ support


def candidate_queries(items: list[tuple[str, Claim]]) -> pd.DataFrame:
    """One BM25 query per A1-A3 claim (query_id = claim sha, so identical claims share)."""
    from lookahead.claims.schema import CATEGORY_RULE

    rows = {sha(c.claim_text): c.claim_text for _, c in items if CATEGORY_RULE[c.category] == "search"}
    return pd.DataFrame({"query_id": list(rows), "query_text": list(rows.values())})


def support_lines(study: Study) -> dict[tuple[str, str], bool]:
    out: dict[tuple[str, str], bool] = {}
    for rec in iter_records(claims_raw_file(study, "claims_support")):
        if rec.get("model_id") == study.backend.model_id and rec.get("supports") is not None:
            out.setdefault((rec["claim_sha256"], rec["doc_id"]), bool(rec["supports"]))
    return out


class Dater:
    """Dates claims against the corpus: BM25 candidates (computed once for all claims
    given), support by the configured judge, then Eq. 3 (lookahead.claims.dating)."""

    def __init__(
        self, corpus: pd.DataFrame, st: ClaimsResolved, claims: list[Claim], judged: dict[tuple[str, str], bool]
    ) -> None:
        self.st = st
        self.judged = judged
        cands = bm25(candidate_queries([("", c) for c in claims]), corpus, st.claims.claims_bm25_k)
        self.by_claim = {k: g for k, g in cands.groupby("query_id")} if not cands.empty else {}
        self.bodies = {
            d: normalize(f"{t} {b}") for d, t, b in zip(corpus["doc_id"], corpus["title"], corpus["body"], strict=False)
        }

    def candidates(self, claim: Claim) -> pd.DataFrame | None:
        return self.by_claim.get(sha(claim.claim_text))

    def date(self, claim: Claim, t_ref: dt.date) -> tuple[Any, int, int, int]:
        """(Leakage, candidates, supporting documents, candidates not judged yet)."""
        csha = sha(claim.claim_text)
        g = self.by_claim.get(csha)
        n_cand, dates, pending = 0, [], 0
        if g is not None:
            n_cand = len(g)
            for doc, pub in zip(g["doc_id"], g["published_at"], strict=False):
                ok: bool | None
                if self.st.claims.claims_support_judge == "contains":
                    ok = normalize(claim.claim_text) in self.bodies[doc]
                else:
                    ok = self.judged.get((csha, doc))
                    if ok is None:
                        pending += 1
                        continue
                if ok:
                    dates.append(pd.Timestamp(pub).date())
        lk = claim_leakage(claim.category, t_ref, dates, claim.temporal_reference, self.st.claims.claims_vague_period)
        return lk, n_cand, len(dates), pending


# ------------------------------------------------------------------ values

#: A coalition value's lookup key: instance, agent, claims sha, mask and task kind (None
#: on lines written before lines carried it).
ValueKey = tuple[str, str, str, int, str | None]
#: A re-prediction's: instance, agent, rationale sha and task kind.
RepredictKey = tuple[str, str, str, str | None]


def value_form(prompt: str, value: str) -> tuple[str, str]:
    """The coalition prompt and value reading a line was asked under (settings
    claims_coalition_prompt, claims_coalition_value): a study reads only its own."""
    return prompt, value


def line_form(params: dict[str, Any]) -> tuple[str, str]:
    """A coalition line's form from its params; a line written before they were recorded
    was asked with the legacy prompt and read from label tokens."""
    return value_form(params.get("coalition_prompt") or "legacy", params.get("coalition_value") or "token")


def value_lines(study: Study) -> dict[ValueKey, dict[str, Any]]:
    """(instance_id, agent, claims sha, mask, task kind) -> the coalition's stored answer
    (the fields of the task kind's ``coalition_answer``), for this model: the first line
    written, among the lines of the study's coalition prompt and value reading. Only
    parsed, valid answers are ever written (an unparseable one is a failure, retried)."""
    out: dict[ValueKey, dict[str, Any]] = {}
    form = value_form(study.claims.claims_coalition_prompt, study.claims.claims_coalition_value)
    for rec in iter_records(claims_raw_file(study, "claims_value")):
        params = rec.get("params") or {}
        if rec.get("model_id") == study.backend.model_id and line_form(params) == form:
            out.setdefault((rec["instance_id"], rec["agent"], rec["claims_sha256"], int(rec["mask"]), rec.get("task_kind")), rec)
    return out


def repredict_lines(study: Study) -> dict[RepredictKey, dict[str, Any]]:
    """(instance_id, agent, rationale sha, task kind) -> the last re-prediction line of this model."""
    out: dict[RepredictKey, dict[str, Any]] = {}
    for rec in iter_records(claims_raw_file(study, "claims_repredict")):
        if rec.get("model_id") == study.backend.model_id:
            out[(rec["instance_id"], rec["agent"], rec["rationale_sha256"], rec.get("task_kind"))] = rec
    return out


# ------------------------------------------------------------------ the raw lines read


#: The staging models a build hands the claim tables (models/staging/stg_claim_*.sql),
#: by the ClaimLines field each fills.
STAGED_LINES = {
    "extractions": "stg_claim_extractions",
    "agents": "stg_claim_agent_answers",
    "support": "stg_claim_support",
    "values": "stg_claim_values",
    "repredict": "stg_claim_repredictions",
}


@dataclass
class ClaimLines:
    """The claim jobs' raw lines the claim tables read, one per lookup key, as the
    lookups use them. Two sources, one shape: the jobs read their raw files
    (:meth:`from_files`, the jobs run before any build), a build reads the claim staging
    models (:meth:`from_staged`: parsed, typed and deduplicated in SQL, lines whose
    fields disagree with their key left out and listed in raw_line_rejects)."""

    extractions: dict[tuple[str, str, str], dict[str, Any]]
    timespec: dict[tuple[str, str], list[dict[str, Any]]]
    support: dict[tuple[str, str], bool]
    values: dict[ValueKey, dict[str, Any]]
    repredict: dict[RepredictKey, dict[str, Any]]
    agents: pd.DataFrame | None = None  # the agent jobs' predictions (inputs.agent_predictions)
    rejects: list[dict[str, Any]] = field(default_factory=list)  # lines not used (claims_rejects rows)

    @classmethod
    def from_files(cls, study: Study) -> ClaimLines:
        return cls(
            extractions=extraction_lines(study),
            timespec=timespec_claims(study),
            support=support_lines(study),
            values=value_lines(study),
            repredict=repredict_lines(study),
        )

    @classmethod
    def from_staged(cls, frames: dict[str, pd.DataFrame]) -> ClaimLines:
        """From the claim staging models' tables (STAGED_LINES field -> table); JSON
        columns arrive as text and are decoded here."""

        rejects: list[dict[str, Any]] = []

        def rows(name: str) -> list[dict[str, Any]]:
            df = frames[name]
            match = df["fields_match"].astype(bool) if len(df) else pd.Series(dtype=bool)
            for r in df[~match].to_dict("records") if len(df) else []:
                rejects.append(
                    {
                        "source": "claim raw lines",
                        "row": None,
                        "column": "key",
                        "reason": f"a line of {STAGED_LINES[name]} (task {r['task']}, line {r['line_number']} of its file) "
                        "disagrees with its key: not used (table raw_line_rejects)",
                    }
                )
            df = df[match] if len(df) else df
            return [{k: (None if _missing(v) else v) for k, v in r.items()} for r in df.to_dict("records")]

        extractions = {}
        for r in rows("extractions"):
            r["claims"] = _json(r["claims"])
            r["attempt"] = int(r["attempt"]) if r["attempt"] is not None else 0
            extractions[(r["instance_id"], r["agent"], r["rationale_sha256"])] = r
        agents, timespec = [], {}
        # in the order written, rationale lines before TimeSPEC's (the order the files are read)
        for r in sorted(rows("agents"), key=lambda r: (r["task_order"], r["line_number"])):
            if r["task"] == "claims_timespec":
                timespec[(r["instance_id"], r["agent"])] = _json(r["claims"])
            agents.append(r)
        values = {}
        for r in rows("values"):
            rec = {"label_probs": _json(r["label_probs"]), "value": r["value"], "ranking": _json(r["ranking"])}
            values[(r["instance_id"], r["agent"], r["claims_sha256"], int(r["mask"]), r["task_kind"])] = rec
        repredict = {}
        for r in rows("repredict"):
            r["top_logprobs"] = _json(r["top_logprobs"])
            r["label_probs"], r["ranking"] = _json(r.get("label_probs")), _json(r.get("ranking"))
            repredict[(r["instance_id"], r["agent"], r["rationale_sha256"], r["task_kind"])] = r
        return cls(
            extractions=extractions,
            timespec=timespec,
            support={(r["claim_sha256"], r["doc_id"]): bool(r["supports"]) for r in rows("support")},
            values=values,
            repredict=repredict,
            agents=agent_frame(agents),
            rejects=rejects,
        )


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v


# ------------------------------------------------------------------ re-prediction check


def repredict_table(study: Study, st: ClaimsResolved, preds: pd.DataFrame, lines: ClaimLines | None = None) -> pd.DataFrame:
    """One row per instance re-predicted by llm_jobs.claims_repredict (matched on the
    rationale's content, this model and task kind; the last line wins): the original and
    re-predicted prediction and the error of Eq. 12 (relative error of the probability of
    the target class or of the value) or Eq. 13 (relative Kendall distance)."""
    kind, ks = st.kind, st
    lines = lines or ClaimLines.from_files(study)
    rows = []
    for r in preds.to_dict("records"):
        line = lines.repredict.get((r["instance_id"], r["agent"], sha(r["rationale"]), kind.name))
        if line is None:
            continue
        try:
            parsed = kind.stored_answer(line, ks, kind.items(r["prediction"]))
        except PredictionError:  # a line of another value reading (claims_coalition_value): not this study's
            continue
        new, new_p = kind.final_prediction(parsed, ks)
        prob = r.get("probability")
        prob = float(prob) if prob is not None and not pd.isna(prob) else None
        rows.append(
            {
                "instance_id": r["instance_id"],
                "agent": r["agent"],
                "task": r["task"],
                "task_kind": kind.name,
                "prediction": r["prediction"],
                "original_probability": kind.target_probability(r["prediction"], prob, ks),
                "repredicted": new,
                "repredicted_probability": new_p,
                "repred_metric_name": kind.repred_metric_name,
                "repred_error": None if new is None else kind.repred_error(r["prediction"], prob, new, new_p, ks),
                "attempts": line.get("attempts", 1),
            }
        )
    return pd.DataFrame(rows, columns=REPRED_COLUMNS)


# ------------------------------------------------------------------ build


def _empty(cols: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})


def build(study: Study, lines: ClaimLines | None = None) -> dict[str, pd.DataFrame]:
    """claims, instance_leakage, claims_summary, claims_repredict, claims_rejects as
    DataFrames, from the claim jobs' raw ``lines`` (the staged lines of a build; by
    default the jobs' raw files, read here)."""
    study = claim_study(study)
    st = ClaimsResolved.from_study(study)
    lines = lines or ClaimLines.from_files(study)
    preds, rejects = load_predictions(study, st, lines.agents)
    rejects = [*lines.rejects, *rejects]
    corpus, corpus_rejects = load_corpus(st)
    rejects += corpus_rejects
    if preds.empty:
        return {
            "claims": _empty(CLAIM_COLUMNS),
            "instance_leakage": _empty(INSTANCE_COLUMNS),
            "claims_summary": _empty(SUMMARY_COLUMNS),
            "claims_repredict": _empty(REPRED_COLUMNS),
            "claims_rejects": pd.DataFrame(rejects, columns=REJECT_COLUMNS),
        }
    if corpus.empty:
        rejects.append(
            {
                "source": "corpus",
                "row": None,
                "column": "claims_corpus_path",
                "reason": "empty or no corpus: A1-A3 claims are dated by their temporal reference alone (otherwise unverifiable)",
            }
        )
    pairs = instance_claims(study, st, preds, lines)
    rows = [r for r, _ in pairs]
    extractions = [e for _, e in pairs]

    # BM25 candidates for every A1-A3 claim, then support (rule or cached judgments)
    items = [(instance_key(r["instance_id"], r["agent"]), c) for r, e in zip(rows, extractions, strict=False) for c in e.claims]
    dater = Dater(corpus, st, [c for _, c in items], lines.support if st.claims.claims_support_judge == "llm" else {})
    kind, ks = st.kind, st
    values = lines.values
    defaults = insufficient_values(st) if st.claims.claims_coalition_prompt == "seed" else {}

    claim_rows, inst_rows = [], []
    for r, ex in zip(rows, extractions, strict=False):
        t_ref = dt.date.fromisoformat(r["t_ref"])
        states, per_claim = [], []
        for c in ex.claims:
            lk, n_cand, n_sup, pending = dater.date(c, t_ref)
            reason = lk.reason + (f" ({pending} candidate(s) not judged yet)" if pending else "")
            if c.temporal_reference and parse_period(c.temporal_reference) is None:
                rejects.append(
                    {
                        "source": "claims",
                        "row": None,
                        "column": "temporal_reference",
                        "reason": f"instance {r['instance_id']} ({r['agent']}) claim {c.claim_id}: "
                        f"'{c.temporal_reference}' unparseable; dated by the corpus alone",
                    }
                )
            p = parse_period(c.temporal_reference)
            states.append(lk.state)
            per_claim.append(
                {
                    "instance_id": r["instance_id"],
                    "agent": r["agent"],
                    "task_kind": kind.name,
                    "claim_id": c.claim_id,
                    "claim_text": c.claim_text,
                    "original_text": c.original_text,
                    "category": c.category,
                    "temporal_reference": c.temporal_reference,
                    "temporal_reference_parsed": p.pick(st.claims.claims_vague_period) if p else None,
                    "category_reasoning": c.category_reasoning,
                    "t_ref": t_ref,
                    "tau": lk.tau,
                    "leakage_state": lk.state,
                    "leakage_reason": reason,
                    "n_candidates": n_cand,
                    "n_supporting_docs": n_sup,
                    "shapley": None,
                    "shapley_se": None,
                }
            )
        status = ex.status
        inst: dict[str, Any] = dict.fromkeys(INSTANCE_COLUMNS)
        inst.update(
            instance_id=r["instance_id"],
            agent=r["agent"],
            task=r["task"],
            task_kind=kind.name,
            entity=r["entity"],
            t_ref=t_ref,
            n_claims=len(ex.claims),
            prediction=r["prediction"],
            outcome=r["outcome"],
            value_label=kind.value_label(r["prediction"], ks),
            task_metric_name=kind.metric_name,
        )
        prob = r.get("probability")
        prob = float(prob) if prob is not None and not pd.isna(prob) else None
        inst["p_positive"] = kind.target_probability(r["prediction"], prob, ks)
        inst["task_metric"] = kind.instance_metric(r["prediction"], r["outcome"], prob, ks)
        if status == "ok" and ex.claims:  # OLR needs the claims' states only, not the values
            inst.update(olr=metrics.olr(states), olr_unverifiable_leaked=metrics.olr(states, True))
        if status == "ok":
            n = len(ex.claims)
            key = instance_key(r["instance_id"], r["agent"])
            plan = plan_for(n, key, st.claims.claims_exact_max, st.claims.claims_mc_permutations, st.claims.claims_shapley_seed)
            csha = claims_sha(ex.claims)
            answers = {
                m: values[k] for m in lookup_masks(plan) if (k := (r["instance_id"], r["agent"], csha, m, kind.name)) in values
            }
            if st.claims.claims_coalition_prompt == "seed":  # v(empty set) is RULE 2's default, never queried
                answers[0] = kind.insufficient(ks, kind.items(r["prediction"]), defaults[r["instance_id"]])[1]
            full = (1 << n) - 1
            vals = kind.values(answers, full, r["prediction"], ks) if full in answers else {}
            inst["n_coalitions"] = len(plan.masks)
            if n == 0:  # nothing to attribute: the instance's state does not wait for v(empty)
                status = "no claims"
                inst.update(v_all=vals.get(0), v_empty=vals.get(0), shapley_method="none")
            elif any(m not in vals for m in plan.masks):
                status = "values pending"
            else:
                res = shapley_values(plan, vals)
                if res.method == "exact":  # exact from a complete set of stored values uses all 2^n
                    inst["n_coalitions"] = 1 << n
                for pc, phi, se in zip(per_claim, res.phi, res.se, strict=False):
                    pc["shapley"], pc["shapley_se"] = float(phi), float(se)
                inst.update(
                    v_all=res.v_all,
                    v_empty=res.v_empty,
                    shapley_sum=res.total,
                    efficiency_gap=res.total - (res.v_all - res.v_empty),
                    shapley_method=res.method,
                    max_shapley_se=float(res.se.max()) if n else 0.0,
                )
                phi = res.phi
                se_dclr, lo_dclr, hi_dclr = metrics.shapley_dclr_interval(phi, res.marginals, states)
                inst.update(
                    shapley_dclr=metrics.shapley_dclr(phi, states),
                    shapley_dclr_se=se_dclr,
                    shapley_dclr_ci_low=lo_dclr,
                    shapley_dclr_ci_high=hi_dclr,
                    shapley_dclr_unverifiable_leaked=metrics.shapley_dclr(phi, states, True),
                    **{
                        f"top{k}_leakage{suffix}": metrics.top_k_leakage(phi, states, k, unv, st.claims.claims_topk_denominator)
                        for k in metrics.TOP_K
                        for suffix, unv in (("", False), ("_unverifiable_leaked", True))
                    },
                )
        if status != "ok":
            rejects.append(
                {
                    "source": "instances",
                    "row": None,
                    "column": "status",
                    "reason": f"instance {r['instance_id']} ({r['agent']}): {status}" + (f": {ex.reason}" if ex.reason else ""),
                }
            )
        inst["status"] = status
        inst_rows.append(inst)
        claim_rows += per_claim

    claims = pd.DataFrame(claim_rows, columns=CLAIM_COLUMNS)
    inst_df = pd.DataFrame(inst_rows, columns=INSTANCE_COLUMNS)
    repred = repredict_table(study, st, preds, lines)
    return {
        "claims": claims,
        "instance_leakage": inst_df,
        "claims_summary": summarize(inst_df, st, repred),
        "claims_repredict": repred,
        "claims_rejects": pd.DataFrame(rejects, columns=REJECT_COLUMNS),
    }


def summarize(inst: pd.DataFrame, st: ClaimsResolved, repred: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per agent and task: means of the instance metrics over instances where defined;
    the task metric (Brier score, mean relative error or mean Spearman's rho) and, for
    classification, accuracy over instances with a known outcome; the re-prediction
    check's mean error (Table 5: MRE, or the mean relative Kendall distance)."""
    repred = repred if repred is not None else pd.DataFrame(columns=REPRED_COLUMNS)
    kind, ks = st.kind, st
    rows = []
    for (agent, task), g in inst.groupby(["agent", "task"], sort=True):

        def mean(col: str) -> float | None:
            x = pd.to_numeric(g[col], errors="coerce").dropna()
            return float(x.mean()) if len(x) else None

        per = pd.to_numeric(g["task_metric"], errors="coerce").dropna()
        hits = [c for c in (kind.correct(p, o, ks) for p, o in zip(g["prediction"], g["outcome"], strict=False)) if c is not None]
        task_metric = kind.summary_metric(list(per))
        rows.append(
            {
                "agent": agent,
                "task": task,
                "task_kind": kind.name,
                "n_instances": len(g),
                "n_scored": int((g["status"] == "ok").sum()),
                "n_claims": int(g["n_claims"].sum()),
                "olr": mean("olr"),
                "olr_unverifiable_leaked": mean("olr_unverifiable_leaked"),
                "shapley_dclr": mean("shapley_dclr"),
                "shapley_dclr_unverifiable_leaked": mean("shapley_dclr_unverifiable_leaked"),
                "top1_leakage": mean("top1_leakage"),
                "top3_leakage": mean("top3_leakage"),
                "top5_leakage": mean("top5_leakage"),
                **_mean_intervals(g),
                "task_metric_name": kind.metric_name,
                "task_metric": task_metric,
                "brier": task_metric if kind.metric_name == "brier" else None,
                "accuracy": float(sum(hits) / len(hits)) if hits else None,
                "n_outcomes": len(per),
                "repred_metric_name": kind.repred_metric_name,
                **_repred_mean(repred[(repred["agent"] == agent) & (repred["task"] == task)]),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _mean_intervals(g: pd.DataFrame) -> dict[str, float | None]:
    """The standard error and 95% interval of each summary mean in SUMMARY_INTERVAL_COLUMNS."""
    out: dict[str, float | None] = {}
    for col in SUMMARY_INTERVAL_COLUMNS:
        _, se, lo, hi = metrics.mean_interval(list(pd.to_numeric(g[col], errors="coerce").dropna()))
        out.update({f"{col}_se": se, f"{col}_ci_low": lo, f"{col}_ci_high": hi})
    return out


def _repred_mean(g: pd.DataFrame) -> dict[str, Any]:
    x = pd.to_numeric(g["repred_error"], errors="coerce").dropna()
    return {"repred_error": float(x.mean()) if len(x) else None, "n_repredicted": len(g)}
