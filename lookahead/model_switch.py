"""`--model` (with `--backend`, `--base-url`, `--training-cutoff`): an existing study run on
another model without editing its file.

Why a study of its own: a result belongs to one model, so the other model's run must not
share the study's name, database, cache folder or report. The command writes a study file
that extends the original (``extends:``, lookahead/config.py) and changes only what
belongs to the model: study_name ``<study>__<model>``, model_id, backend, model_path or
base_url, the training cutoff (the other model's, from ``seeds/model_training_cutoffs.csv``
or ``--training-cutoff``: the original's cutoff is the original model's claim), raw_dir
``<raw_dir>/<model>``, and results and outputs in their default folders. The file is
``outputs/studies/<study>__<model>.yml``; `lookahead compare` takes it beside the original.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from lookahead.config import PROJECT_ROOT, SCHEMA, StudyConfigError, default_study_path, parse_date, read_study_file

SWITCHED_DIR = PROJECT_ROOT / "outputs" / "studies"
LOCAL_BACKENDS = ("transformers", "vllm")
#: Settings that belong to the original model and are not inherited by another.
MODEL_BOUND = ("model_path", "gguf_file", "tokenizer_path", "base_url", "served_model", "results_dir", "outputs_dir")


def model_slug(model: str) -> str:
    """A model id or path as a name part: its last path part, other characters as '_'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model.rstrip("/").split("/")[-1]).strip("_.") or "model"


def switched_study(
    study_file: str | None,
    model: str,
    backend: str | None = None,
    base_url: str | None = None,
    training_cutoff: str | None = None,
) -> Path:
    """Write the study file of ``study_file`` run on ``model``; its path."""
    from lookahead.init import proposed_cutoff

    source = Path(study_file) if study_file else default_study_path()
    vars_ = read_study_file(source)
    backend = backend or str(vars_.get("backend"))
    if backend not in SCHEMA.settings["backend"].allowed:
        raise StudyConfigError(f"--backend: '{backend}' is not one of {', '.join(SCHEMA.settings['backend'].allowed)}")
    slug = model_slug(model)
    name = f"{vars_.get('study_name')}__{slug}"
    overrides: dict = {
        "extends": str(source.resolve()),
        "study_name": name,
        "backend": backend,
        **{k: None for k in MODEL_BOUND if k in SCHEMA.settings},
    }
    if backend in LOCAL_BACKENDS:
        overrides["model_path"] = str(Path(model).resolve()) if Path(model).is_dir() else model
        overrides["model_id"] = slug if Path(model).is_dir() else model
    else:
        url = base_url or (vars_.get("base_url") if vars_.get("backend") == backend else None)
        if not url:
            raise StudyConfigError(f"--base-url: backend {backend} needs the endpoint of '{model}'")
        overrides.update(model_id=model, base_url=url)
    if training_cutoff:
        try:
            overrides["training_cutoff"] = parse_date(training_cutoff, "training_cutoff").isoformat()
        except StudyConfigError:
            raise StudyConfigError(f"--training-cutoff: '{training_cutoff}' is not a date YYYY-MM-DD") from None
    else:
        proposed = proposed_cutoff(str(overrides["model_id"]))
        if proposed is None:
            raise StudyConfigError(
                f"--training-cutoff: no training cutoff is listed for '{model}' in "
                "seeds/model_training_cutoffs.csv; give the one on its model card"
            )
        overrides["training_cutoff"] = proposed[0]
    overrides["raw_dir"] = f"{str(vars_.get('raw_dir')).rstrip('/')}/{slug}"
    out = SWITCHED_DIR / f"{name}.yml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"# {source.name} run on {model} (lookahead --model); the study file itself is unchanged.\n"
        + yaml.safe_dump(overrides, sort_keys=False),
        encoding="utf-8",
    )
    return out
