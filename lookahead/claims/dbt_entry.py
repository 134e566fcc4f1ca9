"""What the dbt Python models of the claim pipeline call.

A build computes the claim tables as a chain of models, each a stage of
lookahead.claims.tables run once on the tables the models before it wrote:

    staging (stg_claim_*)  -> int_claim_instances   (extraction: each instance's claims)
                           -> int_claims_dated      (BM25 candidates, support, tau, Eq. 3)
                           -> int_claim_coalition_answers (SQL: the stored answers of
                              each instance's claim list, per coalition)
                           -> int_claim_shapley     (v(S) and the Shapley values, Eq. 2)
                           -> the marts claims_py, instance_leakage_py, claims_repredict_py,
                              claims_summary_py, claims_rejects_py

Each model reads the study as the build resolved it (`study_settings.settings_json`, the
one settings object every dbt Python model rebuilds), so the claim tables see the same
settings, defaults included, as the jobs that wrote their raw lines.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lookahead.claims import tables as t
from lookahead.claims.inputs import REJECT_COLUMNS, ClaimsResolved, claim_study, load_corpus, load_predictions
from lookahead.config import Study
from lookahead.stats.protocol import study_from_frame

TABLES = ("claims", "instance_leakage", "claims_summary", "claims_rejects", "claims_repredict")

# The instances and the corpus are read from the study's files by the extraction stage,
# the dating stage and the rejects mart: one process runs a build's Python models, so
# the first reads them and the others take its frames. Keyed by the settings and the
# fingerprint of every file the build reads (lookahead.identity.inputs_fingerprint: the
# claim files and the claim jobs' raw lines), so a second build in the same process
# after an edit reads them again.
_LOCK = threading.Lock()
_READ: dict[tuple[str, str, str], Any] = {}


def _once(what: str, study: Study, read: Callable[[], Any]) -> Any:
    from lookahead.identity import inputs_fingerprint

    key = (what, study.settings_hash, inputs_fingerprint(study))
    with _LOCK:  # dbt's threads: a second model waits for the first's frames
        if key not in _READ:
            for old in [k for k in _READ if k[1:] != key[1:]]:
                del _READ[old]
            _READ[key] = read()
        return _READ[key]


def _predictions(study: Study, st: ClaimsResolved, lines: t.ClaimLines) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    return _once("predictions", study, lambda: load_predictions(study, st, lines.agents))


def _corpus(study: Study, st: ClaimsResolved) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    return _once("corpus", study, lambda: load_corpus(st))


def _frame(relation: Any) -> pd.DataFrame:
    return relation if isinstance(relation, pd.DataFrame) else relation.df()


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """int_claim_instances in the order of the predictions (a table has no order)."""
    return df.sort_values("instance_order", kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class Stage:
    """A claim model: the frames it reads (by name; `study_settings` always) and the
    function of lookahead.claims.tables that computes its table from them."""

    reads: tuple[str, ...]
    compute: Callable[[Study, ClaimsResolved, dict[str, pd.DataFrame]], pd.DataFrame]


def _lines(frames: Mapping[str, pd.DataFrame]) -> t.ClaimLines:
    return t.ClaimLines.from_staged({f: frames[f] for f in t.STAGED_LINES if f in frames})


def _instances(study: Study, st: ClaimsResolved, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    lines = _lines(f)
    preds, _ = _predictions(study, st, lines)
    return t.extract_stage(study, st, preds, lines) if not preds.empty else pd.DataFrame(columns=t.EXTRACTED_COLUMNS)


def _dated(study: Study, st: ClaimsResolved, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    instances = _ordered(f["instances"])
    if instances.empty:  # no corpus read without instances, as tables.build
        return pd.DataFrame(columns=t.DATED_COLUMNS)
    corpus, _ = _corpus(study, st)
    return t.date_stage(st, instances, corpus, _lines(f).support)


def _shapley(study: Study, st: ClaimsResolved, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    answers = t.coalition_answers(t.stage_records(f["answers"]))
    return t.shapley_stage(st, _ordered(f["instances"]), answers)


def _claims(study: Study, st: ClaimsResolved, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    dated = f["dated"].sort_values(["instance_order", "claim_id"], kind="stable")
    return t.claims_stage(dated, f["shapley"])


def _leakage(study: Study, st: ClaimsResolved, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return t.leakage_stage(st, _ordered(f["instances"]), f["dated"], f["shapley"])


def _repredict(study: Study, st: ClaimsResolved, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return t.repredict_table(study, st, _ordered(f["instances"]), _lines(f))


def _summary(study: Study, st: ClaimsResolved, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    inst = pd.DataFrame(t.stage_records(f["instance_leakage"]), columns=t.INSTANCE_COLUMNS)
    return t.summarize(inst, st, f["claims_repredict"])


def _rejects(study: Study, st: ClaimsResolved, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    lines = _lines(f)
    preds, pred_rejects = _predictions(study, st, lines)
    corpus, corpus_rejects = _corpus(study, st)
    rejects = t.input_rejects(lines.rejects, pred_rejects, preds, corpus, corpus_rejects)
    if preds.empty:
        return pd.DataFrame(rejects, columns=REJECT_COLUMNS)
    return t.rejects_stage(rejects, _ordered(f["instances"]), f["dated"], f["instance_leakage"])


#: Every claim model of a build (python_models/intermediate/claims/ and
#: python_models/marts/claims/), by its name; its `reads` name the frames its model hands
#: over: the STAGED_LINES fields (claim staging models) and the tables of earlier stages.
STAGES: dict[str, Stage] = {
    "int_claim_instances": Stage(("extractions", "agents"), _instances),
    "int_claims_dated": Stage(("instances", "support"), _dated),
    "int_claim_shapley": Stage(("instances", "answers"), _shapley),
    "claims_py": Stage(("dated", "shapley"), _claims),
    "instance_leakage_py": Stage(("instances", "dated", "shapley"), _leakage),
    "claims_repredict_py": Stage(("instances", "repredict"), _repredict),
    "claims_summary_py": Stage(("instance_leakage", "claims_repredict"), _summary),
    "claims_rejects_py": Stage((*t.STAGED_LINES, "instances", "dated", "instance_leakage"), _rejects),
}


def stage(name: str, study_settings: pd.DataFrame, **reads: Any) -> pd.DataFrame:
    """The table of the claim model ``name`` for the study of this build (the
    `study_settings` row), from the relations or DataFrames its model hands over."""
    if name not in STAGES:
        raise ValueError(f"unknown claim model '{name}'")
    want = set(STAGES[name].reads)
    if set(reads) != want:
        raise ValueError(f"the claim model '{name}' reads {sorted(want)}, got {sorted(reads)}")
    study = claim_study(study_from_frame(study_settings))
    st = ClaimsResolved.from_study(study)
    return typed(STAGES[name].compute(study, st, {k: _frame(v) for k, v in reads.items()}))


def table(name: str, study_settings: pd.DataFrame) -> pd.DataFrame:
    """One of the five claim tables of the study, computed from the claim jobs' raw files
    (lookahead.claims.tables.build, the jobs' reader; a build computes them from the
    staged lines through :data:`STAGES`), typed as the build types them."""
    if name not in TABLES:
        raise ValueError(f"unknown claim table '{name}'")
    return typed(t.build(study_from_frame(study_settings))[name])


DATE_COLUMNS = {"t_ref", "tau", "temporal_reference_parsed"}
INT_COLUMNS = {
    "claim_id",
    "n_candidates",
    "n_supporting_docs",
    "n_claims",
    "n_coalitions",
    "n_instances",
    "n_scored",
    "n_outcomes",
    "row",
    "n_repredicted",
    "attempts",
    "instance_order",
}
FLOAT_COLUMNS = {
    "shapley",
    "shapley_se",
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
    *[f"{c}_{p}" for c in t.SUMMARY_INTERVAL_COLUMNS for p in ("se", "ci_low", "ci_high")],
    "v_all",
    "v_empty",
    "shapley_sum",
    "efficiency_gap",
    "max_shapley_se",
    "p_positive",
    "brier",
    "accuracy",
    "task_metric",
    "original_probability",
    "repredicted_probability",
    "repred_error",
    "probability",
}
BOOL_COLUMNS = {"temporal_reference_unparseable"}


def typed(df: pd.DataFrame) -> pd.DataFrame:
    """Fixed column types, so an empty table has the same schema as a full one."""
    out = df.copy()
    for col in out.columns:
        if col in DATE_COLUMNS:
            out[col] = pd.to_datetime(out[col]).astype("datetime64[us]")
        elif col in INT_COLUMNS:
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("Int64")
        elif col in FLOAT_COLUMNS:
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("Float64")
        elif col in BOOL_COLUMNS:
            out[col] = out[col].astype("boolean")
        else:
            out[col] = out[col].astype("string")
    return out
