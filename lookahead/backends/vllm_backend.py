"""vLLM offline batch inference: the reference backend for open-weight models.

Why it looks the way it does:
- vLLM lives in its own virtual environment (.venv-vllm, made by scripts/make_vllm_env.sh)
  because it pins its own torch and transformers. ``vllm`` is therefore imported only when
  a VLLMBackend is built, so ``import lookahead.backends`` works in the main venv too.
- vLLM starts worker processes: build the backend under ``if __name__ == "__main__":``
  (the job process llm_jobs.run_all and the preflight llm_jobs.preflight do), or the
  spawned workers re-import the caller.
- Whole lists of prompts go to one ``LLM.generate`` call (batch inference, as the protocol
  asks for vLLM); vLLM schedules them itself.
- Logprobs are vLLM's raw ones (before temperature or penalties), i.e. log_softmax of the
  logits, the same quantity the transformers backend computes.
- Min-K% uses ``prompt_logprobs=0``: vLLM then returns, at each prompt position, the
  log-probability of the actual prompt token (the first position is None).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lookahead.backends.base import Backend, Generation, TokenLogprob, chat_prompt, prompt_token_ids
from lookahead.config import StudyConfigError
from lookahead.settings_sections import BackendSettings


def _vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise StudyConfigError(
            "setting 'backend': 'vllm' needs the vLLM environment: `lookahead jobs` and "
            "`lookahead run` run the jobs there (creating it on first use), or create it with "
            "`bash scripts/make_vllm_env.sh` and run the jobs with "
            "`.venv-vllm/bin/python -m llm_jobs.run_all --study FILE`"
        ) from None
    return vllm


def _number(name: str, value: object) -> float:
    """A numeric engine option as a float; the options reach the backend untyped (a
    study's engine settings), so anything else is one line naming the setting."""
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError:
            pass
    raise StudyConfigError(f"setting '{name}': {value!r} is not a number")


class VLLMBackend(Backend):
    """One ``vllm.LLM`` engine; every call is a single batched ``generate``.

    Options (study settings): model_path (local HF folder; default model_id), tokenizer_path,
    dtype (unset: vLLM's 'auto'), max_model_len, seed, gpu_memory_utilization (on CPU the
    share of RAM reserved for the KV cache), their defaults the declared ones (BackendSettings),
    kv_cache_gib (a fixed KV-cache size, overrides the share), enforce_eager, enable_prefix_caching
    (vLLM's default), max_num_seqs, engine_args (a mapping passed to vllm.LLM as is)."""

    name = "vllm"

    def __init__(self, model_id: str, **options: object) -> None:
        super().__init__(model_id, **options)
        cpu_environment_defaults()
        vllm = _vllm()
        s = BackendSettings.with_defaults(**options)
        model_path = str(s.model_path or model_id)
        if s.model_path and not Path(model_path).exists():
            raise StudyConfigError(f"setting 'model_path': '{model_path}' does not exist")
        self.seed = int(s.seed)
        self.max_model_len = int(s.max_model_len)
        args: dict[str, Any] = {
            "model": model_path,
            "tokenizer": str(s.tokenizer_path or model_path),
            "dtype": str(s.dtype or "auto"),
            "max_model_len": self.max_model_len,
            "seed": self.seed,
            "gpu_memory_utilization": float(s.gpu_memory_utilization),
            "max_logprobs": 20,
        }
        if options.get("kv_cache_gib"):
            # a fixed KV-cache size instead of a share of RAM (smaller on a shared machine)
            args["kv_cache_memory_bytes"] = int(_number("kv_cache_gib", options["kv_cache_gib"]) * 2**30)
        if "enforce_eager" in options:
            # eager skips torch.compile: on this CPU ~15 s to load instead of ~2 min, slower runs
            args["enforce_eager"] = bool(options["enforce_eager"])
        if "enable_prefix_caching" in options:
            args["enable_prefix_caching"] = bool(options["enable_prefix_caching"])
        if "max_num_seqs" in options:
            args["max_num_seqs"] = int(_number("max_num_seqs", options["max_num_seqs"]))
        extra = options.get("engine_args") or {}
        if not isinstance(extra, dict):
            raise StudyConfigError("setting 'engine_args' must be a mapping of vllm.LLM arguments")
        args.update(extra)
        t0 = time.perf_counter()
        self.llm = vllm.LLM(**args)
        self.load_seconds = time.perf_counter() - t0
        self._SamplingParams = vllm.SamplingParams
        self.tokenizer = self.llm.get_tokenizer()

    def render_prompt(self, user_text: str, use_chat_template: bool) -> str:
        """The text itself, or the user turn rendered with the model's chat template."""
        return chat_prompt(self.tokenizer, user_text) if use_chat_template else user_text

    def encode(self, prompt: str) -> list[int]:
        """Token ids by the rule the transformers backend uses (base.prompt_token_ids), so
        both backends score the very same token sequence."""
        return prompt_token_ids(self.tokenizer, prompt)

    def count_tokens(self, prompt: str) -> int:
        return len(self.encode(prompt))

    def context_length(self) -> int | None:
        """The engine's max_model_len (what vLLM accepts, often less than the model's)."""
        try:
            return int(self.llm.llm_engine.model_config.max_model_len)
        except AttributeError:
            return self.max_model_len

    def _inputs(self, prompts: Sequence[str]) -> list[dict[str, list[int]]]:
        return [{"prompt_token_ids": self.encode(p)} for p in prompts]

    def _decode(self, token_id: int, decoded: str | None) -> str:
        return decoded if decoded is not None else self.tokenizer.decode([token_id])

    def generate(self, prompts: Sequence[str], max_tokens: int, top_logprobs: int) -> list[Generation]:
        """Greedy decoding; the k most likely tokens at the first generated position."""
        if not prompts:
            return []
        outs = self.llm.generate(self._inputs(prompts), self._greedy(max_tokens, top_logprobs), use_tqdm=False)
        return [self._generation(prompt, out, top_logprobs) for prompt, out in zip(prompts, outs, strict=False)]

    def _greedy(self, max_tokens: int, top_logprobs: int, **extra: Any) -> Any:
        """Greedy decoding's SamplingParams with the top-k at each generated position
        (``extra``: what the request asks beside, e.g. ``prompt_logprobs``)."""
        return self._SamplingParams(
            temperature=0.0, max_tokens=max_tokens, seed=self.seed, logprobs=top_logprobs if top_logprobs > 0 else None, **extra
        )

    def _generation(self, prompt: str, out: Any, top_logprobs: int) -> Generation:
        """A request's answer and the top-k at its first generated position."""
        comp = out.outputs[0]
        top: list[TokenLogprob] = []
        if top_logprobs > 0 and comp.logprobs:
            # vLLM returns the top-k plus the sampled token when that lies outside them;
            # keep the k most likely, as an API's top_logprobs would.
            items = sorted(comp.logprobs[0].items(), key=lambda kv: -kv[1].logprob)
            top = [
                TokenLogprob(int(tid), self._decode(tid, lp.decoded_token), float(lp.logprob)) for tid, lp in items[:top_logprobs]
            ]
        return Generation(prompt=prompt, response_text=comp.text, top_logprobs=top)

    def fused_scoring(self) -> bool:
        """One request returns the answer and the prompt's token log-probs
        (``prompt_logprobs`` beside ``logprobs`` in one SamplingParams)."""
        return True

    def generate_scored(
        self, prompts: Sequence[str], max_tokens: int, top_logprobs: int, vocab_moments: bool = False
    ) -> list[tuple[Generation, list[TokenLogprob]]]:
        """Per prompt, :meth:`generate`'s greedy answer and :meth:`prompt_logprobs`' entries
        from one request: vLLM computes the prompt log-probs in the prefill the answer
        decodes from, so the prompt is read once. No vocabulary moments (vLLM returns
        log-probs of chosen tokens only; lookahead.measures refuses Min-K%++ on vLLM
        before any query)."""
        if vocab_moments:
            raise NotImplementedError("backend 'vllm' has no vocabulary moments (Min-K%++)")
        if not prompts:
            return []
        params = self._greedy(max_tokens, top_logprobs, prompt_logprobs=0)
        outs = self.llm.generate(self._inputs(prompts), params, use_tqdm=False)
        return [(self._generation(p, out, top_logprobs), self._prompt_row(out)) for p, out in zip(prompts, outs, strict=False)]

    def generate_json(self, prompts: Sequence[str], max_tokens: int, schema: dict[str, Any]) -> list[Generation]:
        """Greedy answers constrained to a JSON Schema by vLLM's structured outputs
        (guided decoding): ``StructuredOutputsParams(json=schema)`` from vLLM 0.12 on,
        ``GuidedDecodingParams(json=schema)`` before. The claim extraction and TimeSPEC's
        supervisor use it (llm_jobs.claims_extract); their answers are still validated
        against the schema after the fact, so a truncated answer (max_tokens) is caught."""
        if not prompts:
            return []
        from vllm import sampling_params as sp

        if hasattr(sp, "StructuredOutputsParams"):
            constraint = {"structured_outputs": sp.StructuredOutputsParams(json=schema)}
        else:  # vLLM < 0.12
            constraint = {"guided_decoding": sp.GuidedDecodingParams(json=schema)}
        params = self._SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=self.seed, **constraint)
        outs = self.llm.generate(self._inputs(prompts), params, use_tqdm=False)
        return [Generation(prompt=p, response_text=o.outputs[0].text) for p, o in zip(prompts, outs, strict=False)]

    def prompt_logprobs(self, prompts: Sequence[str]) -> list[list[TokenLogprob]]:
        """Per prompt token, the log-probability of that token given its prefix."""
        if not prompts:
            return []
        params = self._SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, seed=self.seed)
        outs = self.llm.generate(self._inputs(prompts), params, use_tqdm=False)
        return [self._prompt_row(out) for out in outs]

    def _prompt_row(self, out: Any) -> list[TokenLogprob]:
        """A request's prompt token log-probs (``prompt_logprobs=0``: the actual token's)."""
        ids = list(out.prompt_token_ids or [])
        plps = out.prompt_logprobs or []
        row: list[TokenLogprob] = []
        for i, tid in enumerate(ids):
            entry = plps[i] if i < len(plps) else None
            if i == 0 or entry is None:
                row.append(TokenLogprob(int(tid), self.tokenizer.decode([tid]), None))
                continue
            lp = entry[tid]  # the actual prompt token is always in the dict
            row.append(TokenLogprob(int(tid), self._decode(tid, lp.decoded_token), float(lp.logprob)))
        return row

    def sample(self, prompts: Sequence[str], n: int, seed: int, max_tokens: int) -> list[list[str]]:
        """Fallback: n answers per prompt at temperature 1 with a fixed seed (n_samples,
        at least the protocol's 25 by the settings schema)."""
        params = self._SamplingParams(n=n, temperature=1.0, seed=seed, max_tokens=max_tokens)
        outs = self.llm.generate(self._inputs(prompts), params, use_tqdm=False)
        return [[c.text for c in sorted(o.outputs, key=lambda c: c.index)] for o in outs]

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            self.llm = None


def cpu_environment_defaults() -> None:
    """No usage reports to the outside (there is no network here, and a study's data stays)."""
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
