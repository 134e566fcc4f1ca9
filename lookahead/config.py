"""The study configuration, read the same way by the LLM jobs, the report and dbt.

dbt reads its vars from ``dbt_project.yml`` and ``--vars``; this module reproduces
that merge (project vars, then a study file, then explicit overrides) so a job and
``dbt build`` always see the same settings. Every setting is checked here with an
error that names it, because a typo in a cutoff date must stop the study before any
query is paid for."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent

PROTOCOL_COLUMNS = (
    "row_id", "entity_id", "entity_name", "ticker", "text", "text_date", "target_date", "outcome",
)
OPTIONAL_COLUMNS = ("row_id", "ticker")

CHOICES: dict[str, tuple[str, ...]] = {
    "backend": ("transformers", "vllm", "openai"),
    "period_frequency": ("trading_day", "day", "week", "month", "fiscal_quarter"),
    "cluster": ("entity", "period", "date", "none"),
    "high_lap_rule": ("pooled_median", "entity_mean_median"),
    "lap_measure": ("recall", "mink"),
    "mink_mean": ("geometric", "arithmetic"),
}

REQUIRED = (
    "data_path", "column_map", "raw_dir", "model_id", "backend", "training_cutoff",
    "period_frequency", "cluster", "high_lap_rule", "lap_measure", "forecast_prompt",
    "forecast_labels", "recall_template", "recall_labels", "outcome_description",
    "reference_period",
)


class StudyConfigError(ValueError):
    """A missing or invalid study setting; the message names the setting."""


@dataclass(frozen=True)
class Study:
    """Validated study settings (the dbt vars) plus where they came from."""

    vars: dict[str, Any]
    root: Path

    def __getitem__(self, key: str) -> Any:
        return self.vars[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.vars.get(key, default)

    def path(self, key: str) -> Path:
        """A path setting resolved against the project root (as dbt resolves it)."""
        p = Path(str(self.vars[key]))
        return p if p.is_absolute() else self.root / p

    @property
    def raw_dir(self) -> Path:
        return self.path("raw_dir")

    def raw_file(self, task: str) -> Path:
        return self.raw_dir / f"{task}.jsonl"

    @property
    def cutoff(self) -> dt.date:
        return _parse_date(self.vars["training_cutoff"], "training_cutoff")


def _parse_date(value: Any, name: str) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise StudyConfigError(
            f"setting '{name}': '{value}' is not a date (use YYYY-MM-DD)"
        ) from None


def project_vars(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The vars block of dbt_project.yml (the study defaults)."""
    with open(root / "dbt_project.yml", encoding="utf-8") as fh:
        return dict(yaml.safe_load(fh).get("vars") or {})


def read_study_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A study file: a YAML mapping of var overrides, the same text `--vars` takes."""
    p = Path(path)
    if not p.exists():
        raise StudyConfigError(f"study file '{p}' does not exist")
    data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise StudyConfigError(f"study file '{p}' must be a YAML mapping of settings")
    return data


def load_study(
    study_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    root: Path = PROJECT_ROOT,
) -> Study:
    """Merge project vars, the study file (or $LOOKAHEAD_STUDY) and overrides, then validate.

    Top-level keys replace whole values, exactly as dbt's --vars does."""
    merged = project_vars(root)
    study_file = study_file or os.environ.get("LOOKAHEAD_STUDY") or None
    if study_file:
        merged.update(read_study_file(study_file))
    if overrides:
        merged.update(overrides)
    validate(merged)
    return Study(vars=merged, root=root)


def validate(v: Mapping[str, Any]) -> None:
    """Raise StudyConfigError naming the first bad setting."""
    for key in REQUIRED:
        if key not in v or v[key] is None or v[key] == "":
            raise StudyConfigError(f"setting '{key}' is missing")
    for key, allowed in CHOICES.items():
        if key in v and v[key] not in allowed:
            raise StudyConfigError(
                f"setting '{key}': '{v[key]}' is not one of {', '.join(allowed)}"
            )
    _parse_date(v["training_cutoff"], "training_cutoff")
    cmap = v["column_map"]
    if not isinstance(cmap, dict):
        raise StudyConfigError("setting 'column_map' must map protocol columns to your column names")
    unknown = set(cmap) - set(PROTOCOL_COLUMNS)
    if unknown:
        raise StudyConfigError(
            f"setting 'column_map': unknown protocol column(s) {sorted(unknown)}; "
            f"expected {', '.join(PROTOCOL_COLUMNS)}"
        )
    for col in PROTOCOL_COLUMNS:
        if col not in OPTIONAL_COLUMNS and not cmap.get(col):
            raise StudyConfigError(f"setting 'column_map.{col}' is missing")
    fy = v.get("fiscal_year_end_month", 12)
    if not isinstance(fy, int) or not 1 <= fy <= 12:
        raise StudyConfigError(f"setting 'fiscal_year_end_month': '{fy}' is not a month 1-12")
    k = v.get("mink_k", 0.2)
    if not isinstance(k, (int, float)) or not 0 < float(k) <= 1:
        raise StudyConfigError(f"setting 'mink_k': '{k}' must be a fraction in (0, 1]")
    for key in ("forecast_labels", "recall_labels"):
        if not isinstance(v[key], dict) or not v[key]:
            raise StudyConfigError(f"setting '{key}' must be a non-empty mapping")
    for need in ("up", "down", "unknown"):
        if not v["recall_labels"].get(need):
            raise StudyConfigError(f"setting 'recall_labels.{need}' is missing")
    for label, value in v["forecast_labels"].items():
        if not isinstance(value, (int, float)):
            raise StudyConfigError(
                f"setting 'forecast_labels.{label}': '{value}' is not a number"
            )
    if not isinstance(v.get("extra_columns", []) or [], list):
        raise StudyConfigError("setting 'extra_columns' must be a list of column names")
