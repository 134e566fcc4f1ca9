"""The claim pipeline's settings and inputs: predictions, corpus, reference extractions.

Settings are dbt vars (dbt_project.yml, ``claims_*``), read here once for the jobs and
the dbt Python models. With ``claims_predictions_path: null`` and no agent output in the
raw folder there are no instances: every claim model builds empty and the protocol
path is untouched.

Bad input never stops the pipeline with a traceback: a row that cannot be used becomes
one reject row (source, row, column, reason), kept in the ``claims_rejects`` model.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lookahead.cache.files import iter_records
from lookahead.claims.tasks import ClaimsDerived, PredictionError, parse_number
from lookahead.config import Study, StudyConfigError

PREDICTION_COLUMNS = ("instance_id", "agent", "entity", "task", "t_ref", "task_input", "prediction", "rationale", "outcome")
OPTIONAL_PREDICTION_COLUMNS = ("agent", "probability")
INSTANCE_COLUMNS = ("instance_id", "entity", "task", "t_ref", "task_input", "outcome")
CORPUS_COLUMNS = ("doc_id", "published_at", "title", "body")
REJECT_COLUMNS = ["source", "row", "column", "reason"]
AGENT_RAW_TASKS = ("claims_rationale", "claims_timespec")  # raw files whose lines are predictions


def has_claims(study: Study) -> bool:
    """A study with claim settings: it names a predictions file or task instances."""
    return bool(study.claims.claims_predictions_path or study.claims.claims_instances_path)


#: The claim path in dbt's node selection: the models of the `claims` folders under
#: models/ and python_models/ (dbt_project.yml tags them) and their tests.
CLAIM_PATH = "tag:claims"


def protocol_build_selection(study: Study) -> tuple[str, ...]:
    """`dbt build`'s selection for a protocol study: every node, or every node but the
    claim path for a study without claim settings (the claim jobs' staging tables stay:
    the raw-line rejects read them).

    Why: built for a study without claims, the claim path is a third of a build's nodes and
    node time (122 of 314, 8.5 of 26.9 s in the demo's default study) spent on empty tables.
    A plain `dbt build` still builds them, empty; either way no claim table is left from an
    earlier build of the study with claims (macros/build_log.sql drops them at run start)."""
    return () if has_claims(study) else ("--exclude", CLAIM_PATH)


def claim_study(study: Study) -> Study:
    """The study as the claim pipeline sees it: ``claims_model_id`` / ``claims_model_path``
    (when set) in place of ``model_id`` / ``model_path``.

    Why: a protocol study (the demo's) can carry a claim model of its own, one that
    answers the coalition prompt, while its verdict keeps coming from its protocol model.
    The claim jobs query this model and the claim tables read its raw lines only, so this
    is the one place the swap is made (the jobs' context and ``tables.build`` call it).
    Idempotent: a study already swapped is returned as it is."""
    mid, mpath = study.claims.claims_model_id, study.claims.claims_model_path
    if mid is None and mpath is None:
        return study
    if mpath is None:
        return study.with_settings(model_id=mid)
    # a GGUF name belongs to the protocol model's folder
    return study.with_settings(model_id=mid or study.backend.model_id, model_path=mpath, gguf_file=None)


@dataclass(frozen=True)
class ClaimsResolved(ClaimsDerived):
    """The study's claims section as the claim pipeline uses it: what the kinds derive
    (:class:`lookahead.claims.tasks.ClaimsDerived`) and the input paths resolved against
    the study's root. Every other setting is read from the section,
    ``claims.claims_<setting>`` (types, allowed values, minimums and defaults are the
    settings schema's, lookahead/study_settings.yml, checked once by lookahead.config)."""

    study: Study

    @classmethod
    def from_study(cls, study: Study) -> ClaimsResolved:
        """From the resolved study."""
        return cls(claims=study.claims, study=study)

    def _path(self, value: str | None) -> Path | None:
        return self.study.resolve(value) if value else None

    @property
    def predictions_path(self) -> Path | None:
        """claims_predictions_path, resolved."""
        return self._path(self.claims.claims_predictions_path)

    @property
    def instances_path(self) -> Path | None:
        """claims_instances_path, resolved."""
        return self._path(self.claims.claims_instances_path)

    @property
    def corpus_path(self) -> Path | None:
        """claims_corpus_path, resolved."""
        return self._path(self.claims.claims_corpus_path)

    @property
    def extractions_path(self) -> Path | None:
        """claims_extractions_path, resolved."""
        return self._path(self.claims.claims_extractions_path)


def claims_raw_file(study: Study, task: str) -> Path:
    """<claims_raw_dir>/<task>.jsonl; claims_raw_dir defaults to raw_dir. A separate
    folder lets a claim study share a protocol study's settings (and its raw_dir, which
    dbt's input check requires) without mixing the two kinds of raw lines."""
    return claims_raw_dir(study) / f"{task}.jsonl"


def claims_raw_dir(study: Study) -> Path:
    """The claim jobs' raw folder: claims_raw_dir, else raw_dir (resolved)."""
    return study.resolve(study.claims.claims_raw_dir) if study.claims.claims_raw_dir else study.raw_dir


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read(path: Path, setting: str) -> pd.DataFrame:
    if not path.exists():
        raise StudyConfigError(f"setting '{setting}': file '{path}' does not exist")
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path).astype(str)
    if suffix in (".jsonl", ".json"):
        return pd.read_json(path, lines=suffix == ".jsonl", dtype=str)
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def parse_date(value: Any) -> dt.date | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    try:
        return dt.date.fromisoformat(str(value).strip()[:10])
    except ValueError:
        return None


def _check_columns(df: pd.DataFrame, required: tuple[str, ...], optional: tuple[str, ...], setting: str, path: Path) -> None:
    missing = [c for c in required if c not in df.columns and c not in optional]
    if missing:
        raise StudyConfigError(
            f"setting '{setting}': column(s) {', '.join(missing)} missing in {path}; file has {', '.join(map(str, df.columns))}"
        )


def usable_instances(
    df: pd.DataFrame, source: str, with_prediction: bool, st: ClaimsResolved
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Keep usable rows; one reject per unusable row naming the column. An empty
    rationale is NOT a reject: the instance stays, with status 'empty rationale'.
    The prediction must fit the task kind (lookahead.claims.tasks) and is stored in its
    canonical text; an outcome that does not fit stays (its task metric is then null)."""
    rejects: list[dict[str, Any]] = []
    keep = []
    seen: set[tuple[str, str]] = set()
    for i, r in enumerate(df.to_dict("records"), 1):

        def bad(col: str, why: str) -> None:
            rejects.append({"source": source, "row": i, "column": col, "reason": why})

        iid = str(r.get("instance_id") or "").strip()
        agent = str(r.get("agent") or "user").strip() or "user"
        if not iid:
            bad("instance_id", "empty instance_id")
            continue
        t_ref = parse_date(r.get("t_ref"))
        if t_ref is None:
            bad("t_ref", f"'{r.get('t_ref')}' is not a date (YYYY-MM-DD)")
            continue
        if not str(r.get("task_input") or "").strip():
            bad("task_input", "empty task_input")
            continue
        if with_prediction:
            err = r.get("_error")
            if isinstance(err, str) and err:  # an agent answer that failed its schema (claims_rationale)
                bad("prediction", f"agent answer rejected: {err}")
                continue
            try:
                pred = st.kind.parse(r.get("prediction"), st)
            except PredictionError as exc:
                bad("prediction", str(exc))
                continue
            if (iid, agent) in seen:
                bad("instance_id", f"duplicate (instance_id, agent) = ({iid}, {agent})")
                continue
            seen.add((iid, agent))
        row: dict[str, Any] = {c: ("" if r.get(c) is None else str(r.get(c))) for c in INSTANCE_COLUMNS}
        row.update(instance_id=iid, t_ref=t_ref.isoformat())
        if with_prediction:
            row.update(agent=agent, prediction=pred, rationale=str(r.get("rationale") or ""))
            prob = r.get("probability")
            try:
                row["probability"] = float(prob) if prob not in (None, "") else None
            except ValueError:
                bad("probability", f"'{prob}' is not a number; Brier uses the hard label")
                row["probability"] = None
        keep.append(row)
    return pd.DataFrame(keep), rejects


def load_instances(st: ClaimsResolved) -> pd.DataFrame:
    """Task instances for the agent jobs (rationale, TimeSPEC): no prediction yet."""
    if st.instances_path is None:
        raise StudyConfigError("setting 'claims_instances_path' is not set: the agent jobs need task instances")
    df = _read(st.instances_path, "claims_instances_path")
    _check_columns(df, INSTANCE_COLUMNS, (), "claims_instances_path", st.instances_path)
    rows, rejects = usable_instances(df, "instances", False, st)
    for r in rejects:
        print(f"instances row {r['row']}: column {r['column']}: {r['reason']} (skipped)")
    return rows


def agent_predictions(study: Study, st: ClaimsResolved) -> pd.DataFrame:
    """Predictions written by the agent jobs (raw lines carrying a parsed prediction)."""
    lines = []
    for task in AGENT_RAW_TASKS:
        for rec in iter_records(claims_raw_file(study, task)):
            if rec.get("model_id") != study.backend.model_id or not rec.get("final"):
                continue
            lines.append(rec)
    df = agent_frame(lines)
    if df.empty:
        return df
    # one line per (instance, agent): the last written wins (a rerun with a new prompt)
    return df.drop_duplicates(["instance_id", "agent"], keep="last")


def agent_frame(lines: list[dict[str, Any]]) -> pd.DataFrame:
    """The agent jobs' final lines (this model's, one per instance and agent, or all in
    the order written) as prediction rows, read as usable_instances reads a file."""
    rows = [
        {
            "instance_id": rec["instance_id"],
            "agent": rec["agent"],
            "entity": rec.get("entity", ""),
            "task": rec.get("task_name", ""),
            "t_ref": rec["t_ref"],
            "task_input": rec["task_input"],
            "prediction": rec.get("prediction") or "",
            "rationale": rec.get("rationale") or "",
            "outcome": rec.get("outcome", ""),
            "probability": rec.get("probability"),
            "_error": rec.get("error"),
        }
        for rec in lines
    ]
    return pd.DataFrame(rows)


def load_predictions(
    study: Study, st: ClaimsResolved | None = None, agents: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """All instances to evaluate: the user's predictions file plus the agent jobs' output
    (``agents``: those rows as a build staged them; by default read from the raw files)."""
    st = st or ClaimsResolved.from_study(study)
    frames, rejects = [], []
    if st.predictions_path is not None:
        df = _read(st.predictions_path, "claims_predictions_path")
        _check_columns(df, PREDICTION_COLUMNS, OPTIONAL_PREDICTION_COLUMNS, "claims_predictions_path", st.predictions_path)
        rows, rej = usable_instances(df, "predictions", True, st)
        frames.append(rows)
        rejects += rej
    agents = agent_predictions(study, st) if agents is None else agents
    if not agents.empty:
        rows, rej = usable_instances(agents, "agent output", True, st)
        frames.append(rows)
        rejects += rej
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=[*PREDICTION_COLUMNS, "probability"]), rejects
    out = pd.concat(frames, ignore_index=True)
    dup = out.duplicated(["instance_id", "agent"], keep="first")
    for r in out[dup].itertuples():
        rejects.append(
            {
                "source": "agent output",
                "row": None,
                "column": "instance_id",
                "reason": f"({r.instance_id}, {r.agent}) also in the predictions file; file wins",
            }
        )
    return out[~dup].reset_index(drop=True), rejects


def insufficient_values(st: ClaimsResolved) -> dict[str, float | None]:
    """instance_id -> the value a regression's coalition prompt names for insufficient
    claims (and v(empty set)): the instance's claims_default_column, read from
    claims_instances_path, else claims_predictions_path; without the column, every
    instance gets claims_default_value (a default dict). A bad cell stops with one line
    naming the file, row and column."""
    from collections import defaultdict

    col = st.claims.claims_default_column
    out: dict[str, float | None] = defaultdict(lambda: st.claims.claims_default_value)
    if not col:
        return out
    if st.instances_path is not None:
        path, setting = st.instances_path, "claims_instances_path"
    elif st.predictions_path is not None:
        path, setting = st.predictions_path, "claims_predictions_path"
    else:
        raise StudyConfigError("setting 'claims_default_column' needs claims_instances_path or claims_predictions_path")
    df = _read(path, setting)
    if col not in df.columns or "instance_id" not in df.columns:
        raise StudyConfigError(f"setting 'claims_default_column': {setting} ({path}) has no column '{col}' (or instance_id)")
    for i, r in enumerate(df.to_dict("records"), 1):
        try:
            out[str(r["instance_id"]).strip()] = parse_number(r[col])
        except PredictionError as exc:
            raise StudyConfigError(f"{setting} row {i} column {col}: {exc}") from None
    return out


def insufficient_rule(st: ClaimsResolved) -> Callable[[str, Sequence[str] | None], tuple[str, dict[str, Any]]] | None:
    """RULE (2) of the seed's coalition prompt, per instance: (instance_id, the items of a
    ranking or None) -> (the text 'If claims insufficient: ...' names, the parsed answer
    that is v(empty set)). None under the legacy prompt, which has no such rule, so v(empty
    set) is asked of the model there. One reader for the value job, TimeSPEC's aggregator
    and the tables, so the default they name and the one v(empty set) takes cannot differ."""
    if st.claims.claims_coalition_prompt != "seed":
        return None
    defaults = insufficient_values(st)
    return lambda instance_id, items: st.kind.insufficient(st, items, defaults[instance_id])


def load_corpus(st: ClaimsResolved) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The dated corpus: doc_id, published_at (date), title, body; bad rows rejected."""
    cols = list(CORPUS_COLUMNS)
    if st.corpus_path is None:
        return pd.DataFrame(columns=cols), []
    df = _read(st.corpus_path, "claims_corpus_path")
    _check_columns(df, CORPUS_COLUMNS, (), "claims_corpus_path", st.corpus_path)
    rejects, keep, seen = [], [], set()
    for i, r in enumerate(df.to_dict("records"), 1):
        d = parse_date(r.get("published_at"))
        doc = str(r.get("doc_id") or "").strip()
        if not doc:
            rejects.append({"source": "corpus", "row": i, "column": "doc_id", "reason": "empty doc_id"})
        elif doc in seen:
            rejects.append({"source": "corpus", "row": i, "column": "doc_id", "reason": f"duplicate doc_id {doc}"})
        elif d is None:
            rejects.append(
                {"source": "corpus", "row": i, "column": "published_at", "reason": f"'{r.get('published_at')}' is not a date"}
            )
        else:
            seen.add(doc)
            keep.append({"doc_id": doc, "published_at": d, "title": str(r.get("title") or ""), "body": str(r.get("body") or "")})
    return pd.DataFrame(keep, columns=cols), rejects


def load_reference_extractions(st: ClaimsResolved) -> dict[tuple[str, str], Any]:
    """User-supplied extractions (JSONL: instance_id, agent, claims), e.g. human
    annotation or the demo's planted claims; used instead of the extraction job."""
    out: dict[tuple[str, str], Any] = {}
    if st.extractions_path is None:
        return out
    if not st.extractions_path.exists():
        raise StudyConfigError(f"setting 'claims_extractions_path': file '{st.extractions_path}' does not exist")
    with open(st.extractions_path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                out[(str(rec["instance_id"]), str(rec.get("agent") or "user"))] = {"claims": rec["claims"]}
            except (ValueError, KeyError) as exc:
                raise StudyConfigError(
                    f"setting 'claims_extractions_path': line {n} is not {{instance_id, agent, claims}} JSON ({exc})"
                ) from None
    return out
