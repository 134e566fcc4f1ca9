"""Backend factory: the study's ``backend`` setting -> a loaded Backend.

Each backend module is imported only when chosen, because vLLM lives in its own virtual
environment and importing it (or torch) for an OpenAI study would be slow or fail.
Options come from study vars with the same names; ``backend_options`` (a mapping)
passes anything else through unchanged.
"""

from __future__ import annotations

import importlib
from typing import Any

from lookahead.backends.base import Backend, Generation, TokenLogprob
from lookahead.config import Study, StudyConfigError

__all__ = ["Backend", "Generation", "TokenLogprob", "get_backend", "backend_options", "BACKENDS"]

BACKENDS: dict[str, tuple[str, str]] = {
    "transformers": ("lookahead.backends.transformers_backend", "TransformersBackend"),
    "vllm": ("lookahead.backends.vllm_backend", "VLLMBackend"),
    "openai": ("lookahead.backends.openai_backend", "OpenAIBackend"),
}

# Study vars forwarded to the backend constructor when set.
OPTION_VARS = (
    "model_path", "gguf_file", "tokenizer_path", "base_url", "api_key_env", "allow_remote",
    "concurrency", "max_retries", "timeout_s", "batch_size", "torch_threads",
    "dtype", "matmul_precision", "seed", "max_model_len", "gpu_memory_utilization",
    "api_mode", "served_model", "mink_source", "backoff_s", "backoff_max_s", "mink_body_dtype",
    "device",
)
PATH_VARS = ("model_path", "gguf_file", "tokenizer_path")


def backend_options(study: Study) -> dict[str, Any]:
    """Constructor options from the study: set vars in OPTION_VARS plus backend_options.

    Relative local paths are resolved against the project root (as dbt resolves
    data_path), but only when that path exists, so a hub-style id passes unchanged."""
    opts: dict[str, Any] = {}
    for key in OPTION_VARS:
        value = study.get(key)
        if value is None or value == "":
            continue
        if key in PATH_VARS:
            resolved = study.path(key)
            value = str(resolved) if resolved.exists() else str(value)
        opts[key] = value
    opts.update(study.get("backend_options") or {})  # a mapping: the settings schema checked it
    return opts


def get_backend(study: Study, **overrides: Any) -> Backend:
    """Construct the study's backend (model_id + options); overrides win over the study."""
    kind = study["backend"]  # one of BACKENDS: the settings schema checked it
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
    return cls(study["model_id"], **options)
