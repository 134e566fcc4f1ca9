"""Any OpenAI-compatible server (a hosted API, or `vllm serve` on this machine) via `openai`.

Why it looks the way it does:
- The protocol asks for 8 concurrent requests by default and for respecting rate limits, so
  requests go through a bounded thread pool and every retryable failure (429, 408, 409, 5xx,
  timeouts, dropped connections) is retried with exponential backoff that waits at least as
  long as the server's Retry-After says. The client's own retries are switched off so that
  this one policy (and its counts) is the only one in force.
- The API key is read from the environment variable named by the setting ``api_key_env``
  and is kept only inside the client object: it is never put in ``options``, params, error
  messages or logs (a logging filter masks it should any library log it).
- Observations and entity names must not leave the machine without consent: a base_url
  whose host is not loopback is refused unless the setting ``allow_remote`` is true.
- Min-K% needs the log-probability of every prompt token. Servers offer that in two ways:
  vLLM's ``prompt_logprobs`` extra field on completions, or the legacy completions
  ``echo=True`` with ``logprobs``. ``mink_source: auto`` tries them in that order and stops
  with an error naming this backend when neither is offered.
"""

from __future__ import annotations

import email.utils
import ipaddress
import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar
from urllib.parse import urlparse

from lookahead.backends.base import Backend, Generation, TokenLogprob
from lookahead.config import StudyConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
MINK_SOURCES = ("auto", "prompt_logprobs", "echo")
APIS = ("completions", "chat")


class BackendUnsupportedError(RuntimeError):
    """The server lacks a feature the study needs (e.g. prompt log-probabilities)."""


def is_loopback_url(base_url: str) -> bool:
    """True when the URL's host is this machine (127.0.0.0/8, ::1 or localhost).

    Host names other than localhost are not resolved: a name is treated as remote, which
    errs on the side of asking for consent."""
    host = (urlparse(base_url).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _MaskSecret(logging.Filter):
    """Replaces the API key in any log record (ours, openai's, httpx's) before it is emitted."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secret:
            return True
        msg = record.getMessage()
        if self.secret in msg:
            record.msg = msg.replace(self.secret, "***")
            record.args = None
        return True


_MASK_LOGGERS = ("openai", "httpx", "httpx2", "httpcore", "httpcore2", "lookahead")


def _as_bool(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    raise StudyConfigError(f"setting '{name}': '{value}' is not true or false")


def _as_number(value: object, name: str, minimum: float) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise StudyConfigError(f"setting '{name}': '{value}' is not a number") from None
    if number < minimum:
        raise StudyConfigError(f"setting '{name}': {value} must be at least {minimum}")
    return number


class OpenAIBackend(Backend):
    """Chat or completions against an OpenAI-compatible endpoint, with logprobs.

    Options (study settings): base_url (required), api_mode ('completions' | 'chat'),
    api_key_env (name of the env var holding the key; none for a local server),
    allow_remote (consent to send text off this machine), concurrency (8), max_retries (6),
    timeout_s (60), backoff_s (0.5, doubled per attempt, capped by backoff_max_s 30),
    tokenizer_path (a local tokenizer whose chat template renders completions prompts;
    defaults to model_path), served_model (the name the server knows; default model_id),
    mink_source ('auto' | 'prompt_logprobs' | 'echo')."""

    name = "openai"

    def __init__(self, model_id: str, **options: object) -> None:
        super().__init__(model_id, **options)
        base_url = options.get("base_url")
        if not base_url or not isinstance(base_url, str):
            raise StudyConfigError("setting 'base_url' is missing (the server's /v1 URL)")
        if urlparse(base_url).scheme not in ("http", "https"):
            raise StudyConfigError(f"setting 'base_url': '{base_url}' is not an http(s) URL")
        allow_remote = _as_bool(options.get("allow_remote", False), "allow_remote")
        if not is_loopback_url(base_url) and not allow_remote:
            raise StudyConfigError(
                f"setting 'allow_remote': base_url '{base_url}' is not on this machine; "
                "sending your text and entity names there needs allow_remote: true"
            )
        self.base_url = base_url
        self.api = str(options.get("api_mode") or options.get("api") or "completions")
        if self.api not in APIS:
            raise StudyConfigError(
                f"setting 'api_mode': '{self.api}' is not one of {', '.join(APIS)}"
            )
        self.mink_source = str(options.get("mink_source", "auto"))
        if self.mink_source not in MINK_SOURCES:
            raise StudyConfigError(
                f"setting 'mink_source': '{self.mink_source}' is not one of {', '.join(MINK_SOURCES)}"
            )
        self.concurrency = int(_as_number(options.get("concurrency", 8), "concurrency", 1))
        self.max_retries = int(_as_number(options.get("max_retries", 6), "max_retries", 0))
        self.timeout_s = _as_number(options.get("timeout_s", 60), "timeout_s", 0.001)
        self.backoff_s = _as_number(options.get("backoff_s", 0.5), "backoff_s", 0)
        self.backoff_max_s = _as_number(options.get("backoff_max_s", 30), "backoff_max_s", 0)
        self.served_model = str(options.get("served_model") or model_id)
        self.tokenizer_path = options.get("tokenizer_path") or options.get("model_path")
        self._tokenizer: Any = None
        self.retries_done = 0  # total retries over the backend's life (for reports and tests)
        self._lock = threading.Lock()

        key_env = options.get("api_key_env")
        if key_env:
            key = os.environ.get(str(key_env))
            if not key:
                raise StudyConfigError(
                    f"setting 'api_key_env': environment variable '{key_env}' is not set"
                )
        else:
            key = "EMPTY"  # local servers without --api-key ignore it
        self._mask = _MaskSecret(key if key_env else "")
        for name in _MASK_LOGGERS:
            logging.getLogger(name).addFilter(self._mask)

        import openai  # main venv and .venv-vllm both have it

        self._openai = openai
        self._client = openai.OpenAI(
            api_key=key, base_url=base_url, timeout=self.timeout_s, max_retries=0
        )
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="openai")

    # ---------------------------------------------------------------- plumbing
    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIBackend(model_id={self.model_id!r}, base_url={self.base_url!r}, api={self.api!r})"

    def _with_retries(self, call: Callable[[], T]) -> T:
        """Run one request, retrying retryable failures with backoff and Retry-After."""
        oa = self._openai
        attempt = 0
        while True:
            try:
                return call()
            except (oa.APITimeoutError, oa.APIConnectionError, oa.APIStatusError) as err:
                status = getattr(err, "status_code", None)
                retryable = status is None or status in RETRYABLE_STATUS or status >= 500
                if not retryable or attempt >= self.max_retries:
                    raise
                wait = min(self.backoff_max_s, self.backoff_s * (2**attempt))
                wait *= 1 + 0.1 * random.random()  # jitter so 8 threads do not retry in step
                response = getattr(err, "response", None)
                after = parse_retry_after(getattr(response, "headers", None))
                if after is not None:
                    wait = max(wait, min(after, self.backoff_max_s * 4))
                log.warning(
                    "backend 'openai': %s (attempt %d of %d), retrying in %.2f s",
                    f"HTTP {status}" if status else type(err).__name__,
                    attempt + 1, self.max_retries + 1, wait,
                )
                with self._lock:
                    self.retries_done += 1
                time.sleep(wait)
                attempt += 1

    def _map(self, fn: Callable[[str], T], prompts: Sequence[str]) -> list[T]:
        """Apply ``fn`` to every prompt with at most ``concurrency`` requests in flight."""
        return list(self._pool.map(lambda p: self._with_retries(lambda: fn(p)), prompts))

    def _tokenizer_or_fail(self) -> Any:
        if self._tokenizer is None:
            if not self.tokenizer_path:
                raise StudyConfigError(
                    "setting 'tokenizer_path' is missing: the completions API with "
                    "use_chat_template needs a local tokenizer to render the chat template "
                    "(or use api: chat, where the server applies it)"
                )
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.tokenizer_path))
        return self._tokenizer

    # ---------------------------------------------------------------- interface
    def render_prompt(self, user_text: str, use_chat_template: bool) -> str:
        """Completions: the text itself, or rendered with the model's chat template.

        Chat API: the user message as sent; the server applies its own template."""
        if self.api == "chat" or not use_chat_template:
            return user_text
        tok = self._tokenizer_or_fail()
        if not getattr(tok, "chat_template", None):
            return user_text
        return tok.apply_chat_template(
            [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
        )

    def generate(
        self, prompts: Sequence[str], max_tokens: int, top_logprobs: int
    ) -> list[Generation]:
        """Temperature 0; the top-k alternatives at the first generated position."""
        if self.api == "chat":
            return self._map(lambda p: self._chat_one(p, max_tokens, top_logprobs), prompts)
        return self._map(lambda p: self._completion_one(p, max_tokens, top_logprobs), prompts)

    def _completion_one(self, prompt: str, max_tokens: int, k: int) -> Generation:
        resp = self._client.completions.create(
            model=self.served_model, prompt=prompt, max_tokens=max_tokens,
            temperature=0, logprobs=k if k > 0 else None,
        )
        choice = resp.choices[0]
        top: list[TokenLogprob] = []
        lp = choice.logprobs
        if k > 0 and lp is not None and lp.top_logprobs:
            first = lp.top_logprobs[0] or {}
            top = [TokenLogprob(None, tok, float(v)) for tok, v in first.items()]
            top.sort(key=lambda t: -float(t.logprob))  # type: ignore[arg-type]
        return Generation(prompt=prompt, response_text=choice.text or "", top_logprobs=top)

    def _chat_one(self, prompt: str, max_tokens: int, k: int) -> Generation:
        kwargs: dict[str, Any] = {}
        if k > 0:
            kwargs = {"logprobs": True, "top_logprobs": k}
        resp = self._client.chat.completions.create(
            model=self.served_model, messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens, temperature=0, **kwargs,
        )
        choice = resp.choices[0]
        top: list[TokenLogprob] = []
        content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
        if k > 0 and content:
            top = [TokenLogprob(None, t.token, float(t.logprob)) for t in content[0].top_logprobs]
        return Generation(
            prompt=prompt, response_text=choice.message.content or "", top_logprobs=top
        )

    @property
    def generate_json(self) -> Callable[[Sequence[str], int, dict[str, Any]], list[Generation]] | None:
        """Schema-constrained generation (chat API ``response_format`` json_schema), or
        None on the completions API, where OpenAI has no such parameter; callers then
        validate the free answer themselves (llm_jobs.claims_extract)."""
        if self.api != "chat":
            return None
        return self._generate_json

    def _generate_json(self, prompts: Sequence[str], max_tokens: int, schema: dict[str, Any]) -> list[Generation]:
        fmt = {"type": "json_schema", "json_schema": {"name": "extraction", "schema": schema, "strict": True}}

        def one(prompt: str) -> Generation:
            resp = self._client.chat.completions.create(
                model=self.served_model, messages=[{"role": "user", "content": prompt}],
                max_tokens=max_tokens, temperature=0, response_format=fmt,
            )
            return Generation(prompt=prompt, response_text=resp.choices[0].message.content or "")

        return self._map(one, prompts)

    def prompt_logprobs(self, prompts: Sequence[str]) -> list[list[TokenLogprob]]:
        """Log-probability of each prompt token (first None), via whatever the server offers."""
        if not prompts:
            return []
        order = {"auto": ("prompt_logprobs", "echo"), "prompt_logprobs": ("prompt_logprobs",),
                 "echo": ("echo",)}[self.mink_source]
        tried: list[str] = []
        for source in order:
            fn = self._prompt_lp_vllm if source == "prompt_logprobs" else self._prompt_lp_echo
            first = self._with_retries(lambda: fn(prompts[0]))
            if first is None:
                tried.append(source)
                continue
            self.mink_source = source  # the server answered: use the same route for the rest
            rest = self._map(fn, prompts[1:]) if len(prompts) > 1 else []
            if any(r is None for r in rest):
                raise BackendUnsupportedError(
                    f"backend 'openai' ({self.base_url}): the server stopped returning "
                    f"prompt log-probabilities via {source} part way through"
                )
            return [first, *rest]  # type: ignore[list-item]
        raise BackendUnsupportedError(
            f"backend 'openai' ({self.base_url}) offers no prompt token log-probabilities "
            f"(tried: {', '.join(tried)}); Min-K% needs them. Use lap_measure: recall, "
            "or the vllm or transformers backend."
        )

    def _prompt_lp_vllm(self, prompt: str) -> list[TokenLogprob] | None:
        """vLLM's completions extra field prompt_logprobs=0: each dict holds the actual token.

        ``return_token_ids`` asks vLLM for the prompt's token ids too, so the first token
        (which has no log-prob) still gets its id."""
        try:
            resp = self._client.completions.create(
                model=self.served_model, prompt=prompt, max_tokens=1, temperature=0,
                extra_body={"prompt_logprobs": 0, "return_token_ids": True},
            )
        except self._openai.BadRequestError:
            return None  # the server rejects the unknown field
        choice = resp.choices[0]
        extra = choice.model_extra or {}
        raw = getattr(choice, "prompt_logprobs", None) or extra.get("prompt_logprobs")
        if not raw:
            return None
        ids = getattr(choice, "prompt_token_ids", None) or extra.get("prompt_token_ids") or []
        out: list[TokenLogprob] = []
        for i, entry in enumerate(raw):
            if i == 0 or entry is None:
                tid = int(ids[i]) if i < len(ids) else None
                out.append(TokenLogprob(tid, self._token_text(tid), None))
                continue
            # prompt_logprobs=0 makes vLLM return exactly one entry: the actual prompt token.
            key, info = next(iter(entry.items()))
            if isinstance(info, dict):
                logprob, token = info.get("logprob"), info.get("decoded_token")
            else:
                logprob, token = info, None
            tid = int(key)
            out.append(TokenLogprob(tid, token if token is not None else self._token_text(tid),
                                    float(logprob)))
        return out

    def _token_text(self, token_id: int | None) -> str:
        """Decoded text of a token id when a local tokenizer is configured, else ''."""
        if token_id is None or not self.tokenizer_path:
            return ""
        return str(self._tokenizer_or_fail().decode([token_id]))

    def _prompt_lp_echo(self, prompt: str) -> list[TokenLogprob] | None:
        """Legacy completions echo=True with logprobs: prompt tokens come back with theirs."""
        try:
            resp = self._client.completions.create(
                model=self.served_model, prompt=prompt, max_tokens=1, temperature=0,
                echo=True, logprobs=0,
            )
        except self._openai.BadRequestError:
            return None
        lp = resp.choices[0].logprobs
        if lp is None or not lp.tokens or not lp.token_logprobs:
            return None
        # echo returns prompt tokens then the generated one; keep the prompt part, which is
        # the prefix whose text offsets lie inside the prompt.
        n = len(lp.tokens)
        if lp.text_offset:
            n = sum(1 for off in lp.text_offset if off < len(prompt))
        else:
            n -= 1
        values = lp.token_logprobs[:n]
        if n < 1 or any(v is None for v in values[1:]):
            return None
        return [
            TokenLogprob(None, tok, None if i == 0 else float(v))  # type: ignore[arg-type]
            for i, (tok, v) in enumerate(zip(lp.tokens[:n], values))
        ]

    def sample(self, prompts: Sequence[str], n: int, seed: int, max_tokens: int) -> list[list[str]]:
        """Fallback without logprobs: n answers at temperature 1 with a fixed seed."""
        if n < 25:
            raise StudyConfigError(f"setting 'n_samples': {n} is below the protocol's 25")

        def one(prompt: str) -> list[str]:
            if self.api == "chat":
                resp = self._client.chat.completions.create(
                    model=self.served_model, messages=[{"role": "user", "content": prompt}],
                    max_tokens=max_tokens, temperature=1, n=n, seed=seed,
                )
                texts = [c.message.content or "" for c in sorted(resp.choices, key=lambda c: c.index)]
            else:
                resp = self._client.completions.create(
                    model=self.served_model, prompt=prompt, max_tokens=max_tokens,
                    temperature=1, n=n, seed=seed,
                )
                texts = [c.text or "" for c in sorted(resp.choices, key=lambda c: c.index)]
            if len(texts) != n:
                raise BackendUnsupportedError(
                    f"backend 'openai' ({self.base_url}) returned {len(texts)} samples, not n={n}"
                )
            return texts

        return self._map(one, prompts)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()
        for name in _MASK_LOGGERS:
            logging.getLogger(name).removeFilter(self._mask)
