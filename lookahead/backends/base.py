"""The interface every LLM backend implements (transformers, vLLM, OpenAI-compatible).

Jobs talk only to this interface, so the same recall and Min-K% queries give the same
numbers whichever backend runs them (the parity tests check that)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lookahead.errors import RESUME, UserError

#: torch's float32 matmul precision that is float32 arithmetic on every machine. The lower
#: ones ('high', 'medium') are TF32 on CUDA and bf16 kernels on CPUs with AMX or
#: AVX512-BF16 (they moved SmolLM2's Min-K% LAP by up to 1.2% and 2.3% relative), and
#: nothing on other CPUs: other answers on some machines only.
FULL_MATMUL_PRECISION = "highest"


def reduced_matmul_precision(setting: str | None) -> str | None:
    """A study's ``matmul_precision`` when it may be below float32 on some machine (so it
    joins the Min-K% key and rules out the fused pass), else None (null and 'highest')."""
    return None if setting in (None, FULL_MATMUL_PRECISION) else str(setting)


@dataclass
class TokenLogprob:
    token_id: int | None
    token: str
    logprob: float | None
    vocab_mean: float | None = None  # sum_v p_v log p_v at this position (Min-K%++)
    vocab_var: float | None = None  # sum_v p_v (log p_v)^2 - vocab_mean^2


@dataclass
class Generation:
    """One answer: generated text and the top-k alternatives at the first generated position."""

    prompt: str
    response_text: str
    top_logprobs: list[TokenLogprob] = field(default_factory=list)
    samples: list[str] | None = None


@dataclass
class QueryFailure:
    """A query that got no complete answer within the retry bound.

    Returned in place of an answer by ``try_generate`` / ``try_prompt_logprobs`` so that
    one failed query costs neither the rest of its batch nor a crash: the job records it
    in ``<task>.failures.jsonl`` and retries it on the next run. ``reason`` is one short
    line (secrets masked); ``error`` keeps the last exception for callers that re-raise.

    ``permanent``: no retry would change the reply (a 4xx other than 408/409/429, a
    content refusal, a route the server rejects for this prompt). Such a query is recorded
    once with its reason and not asked again unless the user asks (``--retry-failed``):
    paying the retry bound on every run for an answer that never comes blocks nothing but
    the budget, and the row is excluded and counted instead."""

    reason: str
    attempts: int = 1
    error: BaseException | None = None
    permanent: bool = False


class BackendFatal(UserError, RuntimeError):
    """The backend cannot answer any query (bad key, unknown model, server down):
    retrying other queries would only pay again for the same refusal. The job stops with
    exit 4; the answers it finished are in the cache, so the same command resumes once
    the cause is fixed."""

    prefix = "stopped"
    exit_code = 4  # lookahead.guard's EXIT_INCOMPLETE

    def line(self, saved: str = "") -> str:
        return f"{self.prefix}: {self}; finished answers are saved; {RESUME}."


class Backend(ABC):
    """A loaded model. ``name`` goes into every raw line."""

    name: str = "base"
    #: What a Min-K% line carries from this backend beside its log-probs even when the
    #: study's measures do not need it (lookahead.tasks LINE_EXTRA_BITS), because the same pass
    #: gives it at almost no cost: a measure added later then asks nothing again.
    free_extras: tuple[str, ...] = ()

    def __init__(self, model_id: str, **options: object) -> None:
        self.model_id = model_id
        self.options = options

    @abstractmethod
    def render_prompt(self, user_text: str, use_chat_template: bool) -> str:
        """The exact text that will be sent (chat template applied when asked and available)."""

    @abstractmethod
    def generate(self, prompts: Sequence[str], max_tokens: int, top_logprobs: int) -> list[Generation]:
        """Greedy (temperature 0) generation with top-k logprobs at the first position."""

    @abstractmethod
    def prompt_logprobs(self, prompts: Sequence[str]) -> list[list[TokenLogprob]]:
        """Log-probability of every prompt token given its prefix; the first is None."""

    def context_length(self) -> int | None:
        """The model's context length in tokens, when the backend knows it (None: unknown;
        the study setting context_length then has to say)."""
        return None

    def fused_scoring(self) -> bool:
        """Whether one request per prompt can return both its answer and its prompt token
        log-probs (:meth:`generate_scored`, llm_jobs.fused). A backend that cannot (an API
        without prompt log-probs) leaves it False, and the forecast and the Min-K% jobs
        ask their own requests."""
        return False

    def generate_scored(
        self, prompts: Sequence[str], max_tokens: int, top_logprobs: int, vocab_moments: bool = False
    ) -> list[tuple[Generation, list[TokenLogprob]]]:
        """Per prompt, :meth:`generate`'s answer and :meth:`prompt_logprobs`' entries from
        one request; only where :meth:`fused_scoring` holds."""
        raise NotImplementedError(f"backend '{self.name}' does not answer and score a prompt in one request")

    def try_generate_scored(
        self, prompts: Sequence[str], max_tokens: int, top_logprobs: int, vocab_moments: bool = False
    ) -> list[tuple[Generation, list[TokenLogprob]] | QueryFailure]:
        """Like ``generate_scored`` with per-query failures (see ``try_generate``): a
        server's failed request is that row's failure, recorded by each task's loop."""
        return list(self.generate_scored(prompts, max_tokens, top_logprobs, vocab_moments))

    def try_generate(self, prompts: Sequence[str], max_tokens: int, top_logprobs: int) -> list[Generation | QueryFailure]:
        """Like ``generate`` but a failed query comes back as a QueryFailure in its place.

        Local backends either answer the whole batch or raise (a bug or out of memory,
        not a transient fault), so the default simply calls ``generate``."""
        return list(self.generate(prompts, max_tokens, top_logprobs))

    def try_prompt_logprobs(self, prompts: Sequence[str], vocab_moments: bool = False) -> list[list[TokenLogprob] | QueryFailure]:
        """Like ``prompt_logprobs`` with per-query failures (see ``try_generate``).
        ``vocab_moments``: also the mean and variance of log p over the vocabulary at each
        position (Min-K%++; only a backend that sees the full distribution has them, and
        lookahead.measures refuses the others before any query)."""
        if vocab_moments:
            # the keyword exists only on a backend that computes the moments (transformers):
            # the interface's prompt_logprobs does not take it, and measures asks no other
            return list(self.prompt_logprobs(prompts, vocab_moments=True))  # type: ignore[call-arg]
        return list(self.prompt_logprobs(prompts))

    def try_sample(self, prompts: Sequence[str], n: int, seed: int, max_tokens: int) -> list[list[str] | QueryFailure]:
        """Like ``sample`` with per-query failures (see ``try_generate``)."""
        return list(self.sample(prompts, n, seed, max_tokens))

    def sample(self, prompts: Sequence[str], n: int, seed: int, max_tokens: int) -> list[list[str]]:
        """Sampling fallback (temperature 1) for backends without logprobs."""
        raise NotImplementedError(f"backend '{self.name}' does not implement sampling")

    def close(self) -> None:  # noqa: B027 - optional, on purpose not abstract  # pragma: no cover
        """Free what the backend holds (most hold nothing a process exit does not free)."""


#: Schema-constrained generation: (prompts, max_tokens, JSON schema) -> one answer each.
JsonGenerate = Callable[[Sequence[str], int, dict[str, Any]], list[Generation]]


def json_generation(backend: Backend) -> JsonGenerate | None:
    """The backend's schema-constrained generation (``generate_json``: vLLM's guided
    decoding, the OpenAI chat API's response_format), or None where it has none (the other
    backends; the OpenAI completions API). A capability of some backends, looked up here
    so the claim jobs ask one function rather than each probing the backend."""
    fn = getattr(backend, "generate_json", None)
    return fn if callable(fn) else None


def chat_prompt(tokenizer: Any, user_text: str) -> str:
    """The user turn rendered with a Hugging Face tokenizer's chat template, or the text
    itself where the tokenizer has none. The local backends (transformers, vLLM) share
    it, so a study's prompts are the same text whichever of them asks."""
    if not getattr(tokenizer, "chat_template", None):
        return user_text
    turn = [{"role": "user", "content": user_text}]
    return str(tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True))


def prompt_token_ids(tokenizer: Any, prompt: str) -> list[int]:
    """Token ids as the model sees the prompt: the tokenizer's special tokens are added
    unless the text already starts with the BOS token (a rendered chat template), so no
    BOS is doubled and the local backends score the very same token sequence. A prompt
    with no tokens is a ValueError (there is nothing to score)."""
    bos = getattr(tokenizer, "bos_token", None)
    ids = tokenizer.encode(prompt, add_special_tokens=not (bos and prompt.startswith(bos)))
    if not ids:
        raise ValueError("empty prompt: nothing to score")
    return list(ids)
