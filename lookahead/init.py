"""`lookahead init`: write a study file by asking the protocol's intake questions (seed 000,
"Before running: ask the user for"), then run `lookahead check` on it.

Why a command: a study has about seventeen identifying settings, and a researcher with a
CSV of their own otherwise writes them by hand from the README, derives a target date
themselves and guesses the model's training cutoff. Each question here is one entry of
:data:`QUESTIONS` (what it asks, the flag that answers it, its default); the same list
serves the interactive session (a question per line on stdin) and a script or CI (every
answer a flag, ``--no-input``: a missing answer is one line naming its flag).

Target date. When the data have no target date, init derives one by a rule of
:data:`TARGET_DATE_RULES` and writes a derived file beside the data,
``<name>.with_target_date.csv``: the input columns unchanged plus ``target_date``
(YYYY-MM-DD). The study reads that file, so the jobs and dbt read one and the same
column (nothing derives dates at read time), and the rule is written into the study
file as a comment. Rows whose target date cannot be derived (an unparseable text date,
the last row of an entity under ``next_row``) get an empty cell and are rejected as
"missing target_date", counted by `check`.

Training cutoff. Proposed from ``seeds/model_training_cutoffs.csv`` when the model id
is one of a listed family's ids (or starts with one, e.g. an ``-Instruct`` variant);
otherwise it must be given: it is the model card's claim, not something to guess.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from lookahead.claims.inputs import (
    CORPUS_COLUMNS,
    INSTANCE_COLUMNS,
    OPTIONAL_PREDICTION_COLUMNS,
    PREDICTION_COLUMNS,
)
from lookahead.config import PROJECT_ROOT, SCHEMA, StudyConfigError, parse_date
from lookahead.settings_sections import ClaimsSettings

CUTOFFS_CSV = PROJECT_ROOT / "seeds" / "model_training_cutoffs.csv"
DERIVED_SUFFIX = ".with_target_date.csv"

#: The protocol's recall query (seed 000, step 2), with the study's outcome wording.
PROTOCOL_RECALL_TEMPLATE = (
    "On {target_date}, did {outcome_description} of {entity_name} ({ticker}) go up or down "
    "compared to {reference_period}?\n"
    "Answer based only on what you recall about {entity_name} ({ticker}) on that specific date. "
    'If you do not recall, answer "unknown".\n'
    "Respond with exactly one word and nothing else: up, down, or unknown."
)
#: The same query for data without a ticker column (no empty "()" in the prompt).
PROTOCOL_RECALL_TEMPLATE_NO_TICKER = PROTOCOL_RECALL_TEMPLATE.replace(" ({ticker})", "")

DEFAULT_FORECAST_PROMPT = (
    "Headline about {entity_name} on {text_date}: {text}\n"
    "Will the stock price of {entity_name} go up or down on the next trading day?\n"
    "Answer with exactly one word: up or down."
)


class InitError(StudyConfigError):
    """An intake answer that cannot make a study (one line naming the flag or column)."""


# --- target date rules (a registry: one entry per way of deriving it) ----------------


def _next_business_day(text_date: pd.Series, entity: pd.Series, horizon: int | None) -> pd.Series:
    """The weekday after the text date (Monday to Friday; exchange holidays are not known)."""
    return text_date + pd.offsets.BDay(1)


def _next_row(text_date: pd.Series, entity: pd.Series, horizon: int | None) -> pd.Series:
    """The entity's next later text date (the realization is the next observation's date);
    the entity's last date has none."""
    frame = pd.DataFrame({"entity": entity, "date": text_date})
    dates = frame.dropna().drop_duplicates().sort_values(["entity", "date"])
    dates["next"] = dates.groupby("entity")["date"].shift(-1)
    merged = frame.merge(dates, on=["entity", "date"], how="left")
    return pd.Series(merged["next"].to_numpy(), index=text_date.index)


def _horizon_days(text_date: pd.Series, entity: pd.Series, horizon: int | None) -> pd.Series:
    """The text date plus a fixed horizon of calendar days (--horizon-days)."""
    if not horizon or horizon < 1:
        raise InitError("--horizon-days: the horizon_days rule needs a whole number of days, at least 1")
    return text_date + pd.Timedelta(days=horizon)


@dataclass(frozen=True)
class TargetDateRule:
    """One way of deriving the target date from the text date."""

    meaning: str
    derive: Callable[[pd.Series, pd.Series, int | None], pd.Series]


TARGET_DATE_RULES: dict[str, TargetDateRule] = {
    "next_business_day": TargetDateRule("the next trading (business) day after the text date", _next_business_day),
    "next_row": TargetDateRule("the date of the entity's next row", _next_row),
    "horizon_days": TargetDateRule("the text date plus a fixed number of calendar days", _horizon_days),
}


def write_derived_data(
    data: Path, frame: pd.DataFrame, entity_col: str, text_date_col: str, rule: str, horizon: int | None, date_format: str | None
) -> tuple[Path, int]:
    """The data with a derived ``target_date`` column, written beside them; (path, rows
    without one). The input cells are written back as read (text), so row ids derived from
    them are those of the original file."""
    from lookahead.rows import parse_dates

    if "target_date" in frame.columns:
        raise InitError(f"--target-date: {data.name} has a column 'target_date'; map it instead of deriving one")
    text_date, _ = parse_dates(frame[text_date_col].astype(object), date_format)
    derived = TARGET_DATE_RULES[rule].derive(text_date, frame[entity_col].astype(object), horizon)
    out = frame.copy()
    out["target_date"] = pd.to_datetime(derived).dt.strftime("%Y-%m-%d")
    path = data.with_name(data.name.rsplit(".", 1)[0] + DERIVED_SUFFIX)
    try:
        out.to_csv(path, index=False)
    except OSError as err:
        raise InitError(f"--data: cannot write the derived file {path}: {err.strerror}") from None
    return path, int(out["target_date"].isna().sum())


# --- training cutoffs ----------------------------------------------------------------


def proposed_cutoff(model_id: str, table: Path = CUTOFFS_CSV) -> tuple[str, str] | None:
    """(training_cutoff, model family) from the cutoff table when the model id is listed
    there (or starts with a listed id); the longest listed id wins. None when unknown."""
    if not table.exists() or not model_id:
        return None
    want = model_id.strip().lower()
    best: tuple[int, str, str] | None = None
    with table.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            for listed in row["model_ids"].split(";"):
                ident = listed.strip().split(" ")[0].lower()
                if ident and want.startswith(ident) and (best is None or len(ident) > best[0]):
                    best = (len(ident), row["training_cutoff_setting"], row["model_family"])
    return (best[1], best[2]) if best else None


# --- the questions -------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """One intake question: its answer's key (and flag --key with dashes), what it asks,
    and whether an empty answer is allowed (optional) once its default is applied."""

    key: str
    ask: str
    optional: bool = False
    choices: tuple[str, ...] = ()
    when: Callable[[dict], bool] = lambda answers: True

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


def _choices(setting: str) -> tuple[str, ...]:
    return SCHEMA.settings[setting].allowed


QUESTIONS: tuple[Question, ...] = (
    Question("data", "Data file (CSV or parquet)"),
    Question("entity", "Column of the entity id (stable identifier)"),
    Question("entity_name", "Column of the entity's name as the model would know it (default: the entity id)"),
    Question("ticker", "Column of the ticker or short identifier (blank: none)", optional=True),
    Question("text", "Column of the text fed to the forecast prompt"),
    Question("text_date", "Column of the text's date"),
    Question("target_date", "Column of the realization date of the outcome (blank: derive one)", optional=True),
    Question(
        "target_rule",
        "Derive the target date as",
        choices=tuple(TARGET_DATE_RULES),
        when=lambda answers: not answers.get("target_date"),
    ),
    Question("horizon_days", "Horizon in calendar days", when=lambda answers: answers.get("target_rule") == "horizon_days"),
    Question("outcome", "Column of the signed outcome (larger = up)"),
    Question("date_format", "strptime format of non-ISO dates, e.g. %d/%m/%Y (blank: ISO dates)", optional=True),
    Question("backend", "Backend", choices=_choices("backend")),
    Question("model_id", "Model id (the exact frozen version)"),
    Question("model_path", "Local model weights folder", when=lambda answers: answers.get("backend") in ("transformers", "vllm")),
    Question("base_url", "OpenAI-compatible endpoint URL", when=lambda answers: answers.get("backend") == "openai"),
    Question("training_cutoff", "Training cutoff of that model (YYYY-MM-DD, from its model card)"),
    Question("use_chat_template", "Wrap prompts in the model's chat template (yes for instruct models)", choices=("yes", "no")),
    Question("period_frequency", "Realization-period fixed effects", choices=_choices("period_frequency")),
    Question("forecast_prompt", "Forecast prompt, verbatim (placeholders are column names in braces; \\n for a new line)"),
    Question("forecast_labels", "Forecast labels and their signal, e.g. up=1,down=-1"),
    Question("outcome_description", "The outcome, as the recall query names it"),
    Question("reference_period", "What the outcome moves against"),
    Question("study_name", "Study name"),
    Question("out", "Write the study file to"),
)


def _defaults(answers: dict, columns: Sequence[str]) -> dict[str, str]:
    """Each question's proposed answer, from the answers so far and the data's columns."""
    cutoff = proposed_cutoff(answers.get("model_id") or "")
    stem = Path(answers.get("data") or "study").name.split(".")[0]
    name = answers.get("study_name") or "".join(c if c.isalnum() else "_" for c in stem).strip("_") or "study"
    return {
        "entity_name": answers.get("entity") or "",
        "target_rule": "next_business_day",
        "backend": "transformers",
        "training_cutoff": cutoff[0] if cutoff else "",
        "use_chat_template": "yes" if "instruct" in (answers.get("model_id") or "").lower() else "no",
        "period_frequency": "trading_day" if answers.get("target_rule") == "next_business_day" else "month",
        "forecast_prompt": DEFAULT_FORECAST_PROMPT.replace("\n", "\\n"),
        "forecast_labels": "up=1,down=-1",
        "outcome_description": "the closing stock price",
        "reference_period": "the previous trading day",
        "study_name": name,
        "out": f"{name}.yml",
    }


def read_line(prompt: str) -> str:
    """One answer from stdin; the end of stdin is an empty answer (the default)."""
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    if not line:
        print()
    return line.rstrip("\n")


def gather(
    given: dict[str, str | None], interactive: bool, read: Callable[[str], str] = read_line, form: Form | None = None
) -> dict[str, str]:
    """Every question's answer: a flag's value, else (interactive) the line typed, else its
    default; a required question left without one is one line naming its flag."""
    form = form or FORMS["protocol"]
    answers: dict[str, str] = {}
    columns: list[str] = []
    for q in form.questions:
        if not q.when(answers):
            continue
        default = form.defaults(answers, columns).get(q.key, "")
        value = given.get(q.key)
        if value is None and interactive:
            hint = f" ({'/'.join(q.choices)})" if q.choices else ""
            value = read(f"{q.ask}{hint} [{default}]: ").strip()
            if q.key == "training_cutoff" and not value and default:
                print(f"  proposed from {CUTOFFS_CSV.name}: {default}")
        value = value if value else default
        if not value and not q.optional:
            raise InitError(f"{q.flag}: required ({q.ask})")
        if q.choices and value not in q.choices:
            raise InitError(f"{q.flag}: '{value}' is not one of {', '.join(q.choices)}")
        if value and columns and q.key in COLUMN_KEYS and value not in columns:
            raise InitError(f"{q.flag}: column '{value}' is not in the data; its columns are {', '.join(columns)}")
        answers[q.key] = value
        if q.key == "data":
            columns = _columns(Path(value))
            print(f"{value}: columns {', '.join(columns)}")
        if q.key in CLAIM_FILES and value:
            _claim_file_columns(q, Path(value))
    return answers


COLUMN_KEYS = ("entity", "entity_name", "ticker", "text", "text_date", "target_date", "outcome")


def _columns(path: Path) -> list[str]:
    from lookahead.rows import read_table_chunks

    if not path.is_file():
        raise InitError(f"--data: no file {path}")
    try:
        first = next(read_table_chunks(path, None, 1))
    except StopIteration:
        raise InitError(f"--data: {path} has no rows") from None
    return [str(c) for c in first.columns]


def _labels(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        label, sep, value = part.partition("=")
        try:
            out[label.strip()] = float(value) if sep else float("nan")
        except ValueError:
            raise InitError(f"--forecast-labels: '{part}' is not label=number") from None
        if not sep or not label.strip():
            raise InitError(f"--forecast-labels: '{part}' is not label=number")
    if len(out) < 2:
        raise InitError("--forecast-labels: give at least two labels, e.g. up=1,down=-1")
    return {k: int(v) if float(v).is_integer() else v for k, v in out.items()}


def _study_path(value: str) -> str:
    """A path as a study file writes it: relative to the project when inside it."""
    p = Path(value).resolve()
    return str(p.relative_to(PROJECT_ROOT)) if p.is_relative_to(PROJECT_ROOT) else str(p)


def build_study(answers: dict[str, str]) -> tuple[dict, list[str]]:
    """(the study's settings, the comment lines that head its file) from the answers."""
    data = Path(answers["data"]).resolve()
    comments = [f"Study written by `lookahead init` from {data.name}."]
    target_col = answers.get("target_date") or "target_date"
    if not answers.get("target_date"):
        from lookahead.rows import read_table

        frame = read_table(data)
        horizon = int(answers["horizon_days"]) if answers.get("horizon_days", "").isdigit() else None
        data, missing = write_derived_data(
            data,
            frame,
            answers["entity"],
            answers["text_date"],
            answers["target_rule"],
            horizon,
            answers.get("date_format") or None,
        )
        rule = TARGET_DATE_RULES[answers["target_rule"]].meaning
        comments.append(
            f"target_date derived as {rule} (rule {answers['target_rule']}"
            + (f", {horizon} days" if horizon else "")
            + f"), written to {data.name}."
        )
        print(
            f"target_date derived ({answers['target_rule']}) into {data}" + (f"; {missing} row(s) without one" if missing else "")
        )
    try:
        cutoff = parse_date(answers["training_cutoff"], "training_cutoff").isoformat()
    except StudyConfigError:
        raise InitError(f"--training-cutoff: '{answers['training_cutoff']}' is not a date YYYY-MM-DD") from None
    proposed = proposed_cutoff(answers["model_id"])
    if proposed and proposed[0] == cutoff:
        comments.append(f"training_cutoff from seeds/{CUTOFFS_CSV.name} ({proposed[1]}).")
    ticker = answers.get("ticker") or None
    study: dict = {
        "study_name": answers["study_name"],
        "data_path": _study_path(str(data)),
        "column_map": {
            "row_id": None,
            "entity_id": answers["entity"],
            "entity_name": answers["entity_name"],
            "ticker": ticker,
            "text": answers["text"],
            "text_date": answers["text_date"],
            "target_date": target_col,
            "outcome": answers["outcome"],
        },
        "backend": answers["backend"],
        "model_id": answers["model_id"],
        "training_cutoff": cutoff,
        "period_frequency": answers["period_frequency"],
        "outcome_description": answers["outcome_description"],
        "reference_period": answers["reference_period"],
        "forecast_prompt": answers["forecast_prompt"].replace("\\n", "\n"),
        "recall_template": PROTOCOL_RECALL_TEMPLATE if ticker else PROTOCOL_RECALL_TEMPLATE_NO_TICKER,
        "forecast_labels": _labels(answers["forecast_labels"]),
        "recall_labels": {"up": "up", "down": "down", "unknown": "unknown"},
        "use_chat_template": answers["use_chat_template"] == "yes",
        "raw_dir": f"outputs/raw/{answers['study_name']}",
    }
    if answers.get("model_path"):
        study["model_path"] = _study_path(answers["model_path"])
    if answers.get("base_url"):
        study["base_url"] = answers["base_url"]
    if answers.get("date_format"):
        study["date_format"] = answers["date_format"]
    if answers["entity_name"] == answers["entity"]:
        comments.append("No name column: the entity id is the name the recall query uses.")
    return study, comments


class _BlockDumper(yaml.SafeDumper):
    """Multi-line prompts as literal blocks, as a person would write them."""


_BlockDumper.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None))


def write_study(path: Path, study: dict, comments: list[str]) -> None:
    head = "".join(f"# {c}\n" for c in comments)
    body = yaml.dump(study, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(head + body, encoding="utf-8")
    except OSError as err:
        raise InitError(f"--out: cannot write {path}: {err.strerror}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per question of either form (its answer), plus --claims, --no-input and
    --no-check."""
    seen: set[str] = set()
    for form in FORMS.values():
        for q in form.questions:
            if q.key not in seen:
                seen.add(q.key)
                p.add_argument(q.flag, dest=q.key, default=None, metavar=q.key.upper(), help=q.ask.replace("%", "%%"))
    p.add_argument(
        "--claims",
        action="store_true",
        help="a claim-only study (seed 002, docs/claims.md): predictions or task instances and a dated "
        "corpus, no observations file",
    )
    p.add_argument(
        "--no-input", action="store_true", help="ask nothing: every answer is a flag or its default (for scripts and CI)"
    )
    p.add_argument("--no-check", action="store_true", help="write the study file without running check")


def init(args: argparse.Namespace, read: Callable[[str], str] = read_line) -> Path:
    """Ask, write the study file; its path (`lookahead init` then checks it)."""
    form = FORMS["claims" if getattr(args, "claims", False) else "protocol"]
    given = {q.key: getattr(args, q.key, None) for q in form.questions}
    unasked = [
        q.flag
        for other in FORMS.values()
        if other is not form
        for q in other.questions
        if q.key not in given and getattr(args, q.key, None) is not None
    ]
    if unasked:
        raise InitError(
            f"{unasked[0]}: not a question of this study kind"
            + (
                " (a claim-only study: lookahead init --claims)"
                if form is FORMS["protocol"]
                else " (a protocol study: lookahead init without --claims)"
            )
        )
    answers = gather(given, interactive=not args.no_input, read=read, form=form)
    study, comments = form.build(answers)
    out = Path(answers["out"]).resolve()
    write_study(out, study, comments)
    print(f"study file written: {out}")
    return out


# --- a claim-only study (lookahead init --claims) --------------------------------------


def _claim_choices(setting: str) -> tuple[str, ...]:
    return SCHEMA.settings[setting].allowed


CLAIM_QUESTIONS: tuple[Question, ...] = (
    Question(
        "predictions",
        "Predictions with rationales (CSV, parquet or JSONL; blank: none, the agent jobs write them)",
        optional=True,
    ),
    Question("instances", "Task instances for the agent jobs (blank: none)", optional=True),
    Question(
        "agent_jobs",
        "Agent jobs on the instances, comma-separated (superforecasting, temporal_hint, timespec)",
        when=lambda answers: bool(answers.get("instances")),
    ),
    Question(
        "corpus",
        "Dated corpus: doc_id, published_at, title, body (blank: none; claims are then dated by "
        "their own temporal reference alone)",
        optional=True,
    ),
    Question(
        "extractions",
        "Reference extractions, JSONL of {instance_id, agent, claims} (blank: the model extracts the claims)",
        optional=True,
    ),
    Question("task_kind", "Task kind", choices=_claim_choices("claims_task_kind")),
    Question(
        "labels",
        "The two class labels, comma-separated, the target class first",
        when=lambda answers: answers.get("task_kind") == "classification",
    ),
    Question("task_description", "The task in one line (the extraction prompt's context)"),
    Question(
        "support_judge", "Who judges that a corpus document supports a claim", choices=_claim_choices("claims_support_judge")
    ),
    Question(
        "coalition_prompt",
        "Coalition prompt (seed: the seed's Shapley Prediction prompt; legacy: the earlier one, to reproduce earlier runs)",
        choices=_claim_choices("claims_coalition_prompt"),
    ),
    Question(
        "coalition_value",
        "A classification coalition's value (stated: the probability the model states; token: the label's exact probability)",
        choices=_claim_choices("claims_coalition_value"),
    ),
    Question("backend", "Backend", choices=_choices("backend")),
    Question("model_id", "Model id (the exact frozen version)"),
    Question("model_path", "Local model weights folder", when=lambda answers: answers.get("backend") in ("transformers", "vllm")),
    Question("base_url", "OpenAI-compatible endpoint URL", when=lambda answers: answers.get("backend") == "openai"),
    Question("use_chat_template", "Wrap prompts in the model's chat template (yes for instruct models)", choices=("yes", "no")),
    Question("study_name", "Study name"),
    Question("out", "Write the study file to"),
)

#: question key -> (the setting its file goes to, the columns it must have, optional columns)
CLAIM_FILES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "predictions": ("claims_predictions_path", PREDICTION_COLUMNS, OPTIONAL_PREDICTION_COLUMNS),
    "instances": ("claims_instances_path", INSTANCE_COLUMNS, ()),
    "corpus": ("claims_corpus_path", CORPUS_COLUMNS, ()),
    "extractions": ("claims_extractions_path", (), ()),
}


def _claim_defaults(answers: dict, columns: Sequence[str]) -> dict[str, str]:
    """Each claim question's proposed answer (the settings' declared defaults where there is one)."""
    stem = Path(answers.get("predictions") or answers.get("instances") or "claims").name.split(".")[0]
    name = answers.get("study_name") or "".join(c if c.isalnum() else "_" for c in stem).strip("_") or "claims"
    declared = ClaimsSettings.with_defaults()
    return {
        "agent_jobs": ",".join(declared.claims_agent_jobs or []),
        "task_kind": str(declared.claims_task_kind),
        "labels": ",".join(declared.claims_labels or []),
        "task_description": str(declared.claims_task_description),
        "support_judge": str(declared.claims_support_judge),
        "coalition_prompt": str(declared.claims_coalition_prompt),
        "coalition_value": str(declared.claims_coalition_value),
        "backend": "transformers",
        "use_chat_template": "yes" if "instruct" in (answers.get("model_id") or "").lower() else "no",
        "study_name": name,
        "out": f"{name}.yml",
    }


def _claim_file_columns(q: Question, path: Path) -> None:
    """A claim file named: it exists and has the columns the jobs read (one line naming the
    flag and what is missing), and its columns are listed as for the data file."""
    from lookahead.claims.inputs import _read

    setting, required, optional = CLAIM_FILES[q.key]
    if not path.is_file():
        raise InitError(f"{q.flag}: no file {path}")
    if not required:
        return
    try:
        frame = _read(path, setting)
    except (ValueError, OSError) as err:
        raise InitError(f"{q.flag}: {path} cannot be read: {str(err).splitlines()[0]}") from None
    columns = [str(c) for c in frame.columns]
    print(f"{path}: {len(frame)} rows, columns {', '.join(columns)}")
    missing = [c for c in required if c not in columns and c not in optional]
    if missing:
        raise InitError(
            f"{q.flag}: column(s) {', '.join(missing)} missing in {path.name} "
            f"(it has {', '.join(columns)}; docs/claims.md lists the columns)"
        )


def build_claim_study(answers: dict[str, str]) -> tuple[dict, list[str]]:
    """(a claim-only study's settings, the comment lines that head its file)."""
    if not answers.get("predictions") and not answers.get("instances"):
        raise InitError(
            "--predictions: a claim study needs predictions with rationales (--predictions) or task "
            "instances for the agent jobs (--instances)"
        )
    study: dict = {
        "study_kind": "claims",
        "study_name": answers["study_name"],
        "raw_dir": f"outputs/raw/{answers['study_name']}",
        "backend": answers["backend"],
        "model_id": answers["model_id"],
    }
    if answers.get("model_path"):
        study["model_path"] = _study_path(answers["model_path"])
    if answers.get("base_url"):
        study["base_url"] = answers["base_url"]
    study["use_chat_template"] = answers["use_chat_template"] == "yes"
    study["claims_task_kind"] = answers["task_kind"]
    if answers.get("labels"):
        labels = [s.strip() for s in answers["labels"].split(",") if s.strip()]
        if len(labels) != 2:
            raise InitError(f"--labels: '{answers['labels']}' is not two labels, e.g. up,down")
        study["claims_labels"] = labels
    for key, setting in (
        ("predictions", "claims_predictions_path"),
        ("instances", "claims_instances_path"),
        ("corpus", "claims_corpus_path"),
        ("extractions", "claims_extractions_path"),
    ):
        if answers.get(key):
            study[setting] = _study_path(answers[key])
    if answers.get("instances"):
        jobs = [s.strip() for s in answers.get("agent_jobs", "").split(",") if s.strip()]
        allowed = ("superforecasting", "temporal_hint", "timespec")
        bad = [j for j in jobs if j not in allowed]
        if bad:
            raise InitError(f"--agent-jobs: '{bad[0]}' is not one of {', '.join(allowed)}")
        study["claims_agent_jobs"] = jobs
    study["claims_support_judge"] = answers["support_judge"]
    study["claims_coalition_prompt"] = answers["coalition_prompt"]
    study["claims_coalition_value"] = answers["coalition_value"]
    study["claims_task_description"] = answers["task_description"]
    comments = [
        "Claim-only study written by `lookahead init --claims` (docs/claims.md).",
        "Check it: lookahead check --study <this file>; run it: lookahead run --study <this file>.",
    ]
    return study, comments


@dataclass(frozen=True)
class Form:
    """One kind of study's intake: its questions, their proposed answers and the study they make."""

    questions: tuple[Question, ...]
    defaults: Callable[[dict, Sequence[str]], dict[str, str]]
    build: Callable[[dict[str, str]], tuple[dict, list[str]]]


FORMS: dict[str, Form] = {
    "protocol": Form(QUESTIONS, _defaults, build_study),
    "claims": Form(CLAIM_QUESTIONS, _claim_defaults, build_claim_study),
}
