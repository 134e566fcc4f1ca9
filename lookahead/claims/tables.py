"""The claim-level tables, built from the inputs and the raw JSONL of the claim jobs.

This is the whole deterministic side of the pipeline: extracted claims -> BM25
candidates and support -> tau and leakage state (Eq. 3) -> coalition values -> Shapley
values (Eq. 2) -> OLR, Shapley-DCLR, top-k (Eqs. 9, 10, 14) -> per agent and task with
the Brier score (Eq. 6). A build runs each step as a dbt model (the stages below, through
lookahead.claims.dbt_entry.STAGES: int_claim_instances, int_claims_dated,
int_claim_coalition_answers in SQL, int_claim_shapley, then the marts); ``build`` runs
the same stages in a row on the claim jobs' raw files.

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
    insufficient_rule,
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


def instance_agent_id(instance_id: str, agent: str) -> str:
    """``instance_id|agent``: one agent's answer to one instance, the unit the claim tables
    and the Shapley plan's seed are per (an id, not a cache key: lookahead.keys)."""
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


def timespec_claims(study: Study) -> dict[tuple[str, str], list[dict[str, Any]] | None]:
    """TimeSPEC's final lines' ``claims``: the claims its final rationale is made of when
    that rationale is only their text (``claims_timespec_draft: predictions``, and every
    line written before the final rationale was extracted), else None."""
    out = {}
    for rec in iter_records(claims_raw_file(study, "claims_timespec")):
        if rec.get("model_id") == study.backend.model_id and rec.get("final"):
            out[(rec["instance_id"], rec["agent"])] = rec.get("claims")
    return out


def assembled_claims(row: dict[str, Any], ts: dict) -> list[dict[str, Any]] | None:
    """The extraction of a TimeSPEC final rationale that is exactly its claims' texts
    joined (the rationale TimeSPEC writes when its model cannot write text): those
    claims; None for any other rationale, which the extraction job extracts as every
    agent's (seed 002 scores each agent's final rationale the same way). Matching the
    text, not a flag, keeps every stored line readable: a line of either kind, old or
    new, is scored by what its rationale says."""
    claims = ts.get((row["instance_id"], row["agent"]))
    if not claims or not isinstance(claims, list):
        return None
    texts = [c.get("claim_text") if isinstance(c, dict) else None for c in claims]
    strings = [t for t in texts if isinstance(t, str)]
    if len(strings) != len(texts) or " ".join(strings) != row["rationale"]:
        return None
    return claims


@dataclass
class Extraction:
    status: str  # ok | empty rationale | extraction pending | extraction failed
    claims: list[Claim] = field(default_factory=list)
    reason: str | None = None


def extraction_for(row: dict[str, Any], reference: dict, lines: dict, ts: dict) -> Extraction:
    """Where an instance's claims come from, in order: a TimeSPEC rationale that is its
    claims' text (assembled_claims), the user's reference extractions, the extraction
    job's lines (every other rationale, TimeSPEC's written one included)."""
    key = (row["instance_id"], row["agent"])
    obj = None
    if (given := assembled_claims(row, ts)) is not None:
        obj = {"claims": given}
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
    timespec: dict[tuple[str, str], list[dict[str, Any]] | None]
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
        """From the claim staging models' tables (STAGED_LINES field -> table; a field
        not given is empty, for a stage that reads some of the lines); JSON columns
        arrive as text and are decoded here."""

        rejects: list[dict[str, Any]] = []

        def rows(name: str) -> list[dict[str, Any]]:
            if name not in frames:  # a stage that reads some of the lines only
                return []
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
        values = coalition_answers(rows("values"))
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
            agents=agent_frame(agents) if "agents" in frames else None,
            rejects=rejects,
        )


def coalition_answers(rows: list[dict[str, Any]]) -> dict[ValueKey, dict[str, Any]]:
    """The coalition answers as the Shapley stage looks them up, from staged value rows
    (stg_claim_values, or int_claim_coalition_answers: JSON columns as text)."""
    values = {}
    for r in rows:
        rec = {"label_probs": _json(r["label_probs"]), "value": r["value"], "ranking": _json(r["ranking"])}
        values[(r["instance_id"], r["agent"], r["claims_sha256"], int(r["mask"]), r["task_kind"])] = rec
    return values


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
    default the jobs' raw files, read here). The stages below in the order a build runs
    them as dbt models (extraction -> dating -> Shapley values -> the marts), each
    handed the tables the one before it wrote."""
    study = claim_study(study)
    st = ClaimsResolved.from_study(study)
    lines = lines or ClaimLines.from_files(study)
    preds, corpus, rejects = read_inputs(study, st, lines)
    if preds.empty:
        return empty_tables(rejects)
    instances = extract_stage(study, st, preds, lines)
    dated = date_stage(st, instances, corpus, lines.support)
    values = shapley_stage(st, instances, lines.values)
    inst_df = leakage_stage(st, instances, dated, values)
    repred = repredict_table(study, st, instances, lines)
    return {
        "claims": claims_stage(dated, values),
        "instance_leakage": inst_df,
        "claims_summary": summarize(inst_df, st, repred),
        "claims_repredict": repred,
        "claims_rejects": rejects_stage(rejects, instances, dated, inst_df),
    }


def empty_tables(rejects: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """The five tables of a study without instances: no rows but the input rejects."""
    return {
        "claims": _empty(CLAIM_COLUMNS),
        "instance_leakage": _empty(INSTANCE_COLUMNS),
        "claims_summary": _empty(SUMMARY_COLUMNS),
        "claims_repredict": _empty(REPRED_COLUMNS),
        "claims_rejects": pd.DataFrame(rejects, columns=REJECT_COLUMNS),
    }


# ------------------------------------------------------------------ the build's stages
#
# Each stage reads and returns DataFrames, so a build runs it as a dbt model on the
# tables the stage before wrote (python_models/intermediate/claims/, through
# lookahead.claims.dbt_entry), and ``build`` runs them in a row on the frames
# themselves. A frame read back from DuckDB carries NaN or NA where the stage wrote
# None, and timestamps where it wrote dates: ``stage_records`` reads both alike.


def read_inputs(study: Study, st: ClaimsResolved, lines: ClaimLines) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]]]:
    """The instances (predictions file and the agent jobs' lines), the corpus, and the
    rejects of the inputs (:func:`input_rejects`)."""
    preds, pred_rejects = load_predictions(study, st, lines.agents)
    corpus, corpus_rejects = load_corpus(st)
    return preds, corpus, input_rejects(lines.rejects, pred_rejects, preds, corpus, corpus_rejects)


def input_rejects(
    line_rejects: list[dict[str, Any]],
    pred_rejects: list[dict[str, Any]],
    preds: pd.DataFrame,
    corpus: pd.DataFrame,
    corpus_rejects: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The rejects of the inputs: staged lines that disagree with their key, then the
    predictions', then the corpus's, then a note when instances meet no corpus."""
    rejects = [*line_rejects, *pred_rejects, *corpus_rejects]
    if not preds.empty and corpus.empty:
        rejects.append(
            {
                "source": "corpus",
                "row": None,
                "column": "claims_corpus_path",
                "reason": "empty or no corpus: A1-A3 claims are dated by their temporal reference alone (otherwise unverifiable)",
            }
        )
    return rejects


#: int_claim_instances: one row per instance and agent with where its claims stand after
#: extraction (the claims themselves as JSON, Claim.as_dict per claim).
EXTRACTED_COLUMNS = [
    "instance_order",
    "instance_id",
    "agent",
    "task",
    "task_kind",
    "entity",
    "t_ref",
    "prediction",
    "rationale",
    "outcome",
    "probability",
    "extraction_status",
    "extraction_reason",
    "n_claims",
    "claims_sha256",
    "claims_json",
]


def extract_stage(study: Study, st: ClaimsResolved, preds: pd.DataFrame, lines: ClaimLines) -> pd.DataFrame:
    """Every instance with its extraction (:func:`instance_claims`), in the order of the
    predictions (instance_order)."""
    out = []
    for i, (r, ex) in enumerate(instance_claims(study, st, preds, lines)):
        prob = r.get("probability")
        out.append(
            {
                "instance_order": i,
                "instance_id": r["instance_id"],
                "agent": r["agent"],
                "task": r["task"],
                "task_kind": st.kind.name,
                "entity": r["entity"],
                "t_ref": r["t_ref"],
                "prediction": r["prediction"],
                "rationale": r["rationale"],
                "outcome": r["outcome"],
                "probability": float(prob) if prob is not None and not pd.isna(prob) else None,
                "extraction_status": ex.status,
                "extraction_reason": ex.reason,
                "n_claims": len(ex.claims),
                "claims_sha256": claims_sha(ex.claims) if ex.status == "ok" else None,
                "claims_json": json.dumps([c.as_dict() for c in ex.claims]),
            }
        )
    return pd.DataFrame(out, columns=EXTRACTED_COLUMNS)


def extracted_claims(row: dict[str, Any]) -> list[Claim]:
    """An int_claim_instances row's claims, as the extraction validated them."""
    return [
        Claim(
            int(d["claim_id"]),
            d["claim_text"],
            d["original_text"],
            d["temporal_reference"],
            d["claim_category"],
            d["category_reasoning"],
        )
        for d in json.loads(row["claims_json"])
    ]


#: int_claims_dated: the claims table less the Shapley values, with the instance's
#: position and whether the claim's temporal reference failed to parse (a claims_rejects row).
DATED_COLUMNS = [
    "instance_order",
    *[c for c in CLAIM_COLUMNS if c not in ("shapley", "shapley_se")],
    "temporal_reference_unparseable",
]


def date_stage(
    st: ClaimsResolved, instances: pd.DataFrame, corpus: pd.DataFrame, support: dict[tuple[str, str], bool]
) -> pd.DataFrame:
    """One row per claim of every instance: BM25 candidates for every A1-A3 claim, then
    support (rule or cached judgments), then tau and the leakage state (Eq. 3)."""
    rows = stage_records(instances)
    extractions = [extracted_claims(r) for r in rows]
    items = [(instance_agent_id(r["instance_id"], r["agent"]), c) for r, cs in zip(rows, extractions, strict=False) for c in cs]
    dater = Dater(corpus, st, [c for _, c in items], support if st.claims.claims_support_judge == "llm" else {})
    kind = st.kind
    out = []
    for r, claims in zip(rows, extractions, strict=False):
        t_ref = _date(r["t_ref"])
        for c in claims:
            lk, n_cand, n_sup, pending = dater.date(c, t_ref)
            reason = lk.reason + (f" ({pending} candidate(s) not judged yet)" if pending else "")
            p = parse_period(c.temporal_reference)
            out.append(
                {
                    "instance_order": r["instance_order"],
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
                    "temporal_reference_unparseable": bool(c.temporal_reference) and p is None,
                }
            )
    return pd.DataFrame(out, columns=DATED_COLUMNS)


#: int_claim_shapley: per instance whose extraction is ok, the state its values leave it
#: in and, once every coalition is scored, the Shapley values of its claims in claim
#: order (JSON lists; the Monte Carlo permutations' marginals, one list per
#: permutation, for the Shapley-DCLR interval).
SHAPLEY_COLUMNS = [
    "instance_id",
    "agent",
    "values_status",
    "n_coalitions",
    "v_all",
    "v_empty",
    "shapley_sum",
    "efficiency_gap",
    "shapley_method",
    "max_shapley_se",
    "shapley_json",
    "shapley_se_json",
    "marginals_json",
]


def shapley_stage(st: ClaimsResolved, instances: pd.DataFrame, values: dict[ValueKey, dict[str, Any]]) -> pd.DataFrame:
    """Coalition values v(S) of each instance whose extraction is ok (the task kind's
    characteristic function of the stored answers ``values``), then its Shapley values
    (Eq. 2): exact or Monte Carlo by the plan (lookahead.claims.shapley)."""
    kind, ks = st.kind, st
    rule_of = insufficient_rule(st)
    out = []
    for r in stage_records(instances):
        if r["extraction_status"] != "ok":
            continue
        inst: dict[str, Any] = dict.fromkeys(SHAPLEY_COLUMNS)
        inst.update(instance_id=r["instance_id"], agent=r["agent"])
        status = "ok"
        n = int(r["n_claims"])
        key = instance_agent_id(r["instance_id"], r["agent"])
        plan = plan_for(n, key, st.claims.claims_exact_max, st.claims.claims_mc_permutations, st.claims.claims_shapley_seed)
        csha = r["claims_sha256"]
        answers = {
            m: values[k] for m in lookup_masks(plan) if (k := (r["instance_id"], r["agent"], csha, m, kind.name)) in values
        }
        if rule_of:  # v(empty set) is RULE 2's default, never queried
            answers[0] = rule_of(r["instance_id"], kind.items(r["prediction"]))[1]
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
            inst.update(
                v_all=res.v_all,
                v_empty=res.v_empty,
                shapley_sum=res.total,
                efficiency_gap=res.total - (res.v_all - res.v_empty),
                shapley_method=res.method,
                max_shapley_se=float(res.se.max()) if n else 0.0,
                shapley_json=json.dumps([float(x) for x in res.phi]),
                shapley_se_json=json.dumps([float(x) for x in res.se]),
                marginals_json=None if res.marginals is None else json.dumps(res.marginals.tolist()),
            )
        inst["values_status"] = status
        out.append(inst)
    return pd.DataFrame(out, columns=SHAPLEY_COLUMNS)


def leakage_stage(st: ClaimsResolved, instances: pd.DataFrame, dated: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """instance_leakage: per instance its status, OLR (Eq. 9), and from its Shapley
    values Shapley-DCLR (Eq. 10) with its interval and top-k leakage (Eq. 14), beside
    the task metric."""
    kind, ks = st.kind, st
    states_of = _states(dated)
    by_instance = {(r["instance_id"], r["agent"]): r for r in stage_records(values)}
    inst_rows = []
    for r in sorted(stage_records(instances), key=lambda r: r["instance_order"]):
        t_ref = _date(r["t_ref"])
        states = states_of.get((r["instance_id"], r["agent"]), [])
        status = r["extraction_status"]
        n = int(r["n_claims"])
        inst: dict[str, Any] = dict.fromkeys(INSTANCE_COLUMNS)
        inst.update(
            instance_id=r["instance_id"],
            agent=r["agent"],
            task=r["task"],
            task_kind=kind.name,
            entity=r["entity"],
            t_ref=t_ref,
            n_claims=n,
            prediction=r["prediction"],
            outcome=r["outcome"],
            value_label=kind.value_label(r["prediction"], ks),
            task_metric_name=kind.metric_name,
        )
        prob = r["probability"]
        inst["p_positive"] = kind.target_probability(r["prediction"], prob, ks)
        inst["task_metric"] = kind.instance_metric(r["prediction"], r["outcome"], prob, ks)
        if status == "ok" and n:  # OLR needs the claims' states only, not the values
            inst.update(olr=metrics.olr(states), olr_unverifiable_leaked=metrics.olr(states, True))
        if status == "ok":
            v = by_instance[(r["instance_id"], r["agent"])]
            status = v["values_status"]
            inst.update({c: v[c] for c in SHAPLEY_COLUMNS if c in INSTANCE_COLUMNS})
            if status == "ok":
                phi = json.loads(v["shapley_json"])
                marginals = None if v["marginals_json"] is None else json.loads(v["marginals_json"])
                se_dclr, lo_dclr, hi_dclr = metrics.shapley_dclr_interval(phi, marginals, states)
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
        inst["status"] = status
        inst_rows.append(inst)
    return pd.DataFrame(inst_rows, columns=INSTANCE_COLUMNS)


def claims_stage(dated: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """claims: the dated claims with each claim's Shapley value and standard error, for
    the instances whose values are all in."""
    by_instance = {(r["instance_id"], r["agent"]): r for r in stage_records(values) if r["shapley_json"] is not None}
    out = []
    for r in stage_records(dated):
        v = by_instance.get((r["instance_id"], r["agent"]))
        i = int(r["claim_id"]) - 1
        out.append(
            {
                **{c: r[c] for c in CLAIM_COLUMNS if c in r},
                "shapley": None if v is None else float(json.loads(v["shapley_json"])[i]),
                "shapley_se": None if v is None else float(json.loads(v["shapley_se_json"])[i]),
            }
        )
    return pd.DataFrame(out, columns=CLAIM_COLUMNS)


def rejects_stage(
    rejects: list[dict[str, Any]], instances: pd.DataFrame, dated: pd.DataFrame, inst: pd.DataFrame
) -> pd.DataFrame:
    """claims_rejects: the inputs' rejects (:func:`read_inputs`), then per instance a
    row per claim whose temporal reference does not parse and, unless the instance is
    scored, a row saying why not."""
    rejects = list(rejects)
    unparseable: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in stage_records(dated):
        if c["temporal_reference_unparseable"]:
            unparseable.setdefault((c["instance_id"], c["agent"]), []).append(c)
    status = {(r["instance_id"], r["agent"]): r["status"] for r in stage_records(inst)}
    for r in sorted(stage_records(instances), key=lambda r: r["instance_order"]):
        for c in unparseable.get((r["instance_id"], r["agent"]), []):
            rejects.append(
                {
                    "source": "claims",
                    "row": None,
                    "column": "temporal_reference",
                    "reason": f"instance {r['instance_id']} ({r['agent']}) claim {int(c['claim_id'])}: "
                    f"'{c['temporal_reference']}' unparseable; dated by the corpus alone",
                }
            )
        s = status[(r["instance_id"], r["agent"])]
        if s != "ok":
            reason = r["extraction_reason"]
            rejects.append(
                {
                    "source": "instances",
                    "row": None,
                    "column": "status",
                    "reason": f"instance {r['instance_id']} ({r['agent']}): {s}" + (f": {reason}" if reason else ""),
                }
            )
    return pd.DataFrame(rejects, columns=REJECT_COLUMNS)


def stage_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A stage's rows as dicts, a missing value as None whether the frame holds None,
    NaN or NA (a frame read back from DuckDB)."""
    return [{k: (None if _missing(v) else v) for k, v in r.items()} for r in df.to_dict("records")]


def _date(v: Any) -> dt.date:
    """A date as the stages compare it, from ISO text, a date or a timestamp."""
    if isinstance(v, str):
        return dt.date.fromisoformat(v)
    return pd.Timestamp(v).date()


def _states(dated: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """Each instance's claims' leakage states, in claim order."""
    out: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for r in stage_records(dated):
        out.setdefault((r["instance_id"], r["agent"]), []).append((int(r["claim_id"]), r["leakage_state"]))
    return {k: [s for _, s in sorted(v)] for k, v in out.items()}


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
