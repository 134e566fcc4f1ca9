"""Any OpenAI-compatible server (a hosted API, or `vllm serve` on this machine) via `openai`.

Why it looks the way it does:
- The protocol asks for 8 concurrent requests by default and for respecting rate limits, so
  requests go through a bounded thread pool and every retryable failure (429, 408, 409, 5xx,
  timeouts, dropped connections, and 200 replies that are no complete answer: non-JSON or
  HTML bodies, missing fields, NaN log-probs) is retried with exponential backoff that
  waits at least as long as the server's Retry-After says. The client's own retries are
  switched off so that this one policy (and its counts) is the only one in force. A query
  still failing at the bound comes back as a QueryFailure in its place (``try_*``
  methods), so the job records it and keeps the rest of the batch.
- The API key is read from the environment variable named by the setting ``api_key_env``
  and is kept only inside the client object: it is never put in ``options`` or params,
  and it is registered with lookahead.masking, which masks it in every message the tool
  prints, logs or writes (exception text from the client library included).
- Observations, entity names and the key must not leave the machine on the study file's
  word alone: a base_url whose host is not loopback needs the setting ``allow_remote``
  and the host named by the person running the command (``--allow-remote HOST``), and
  ``api_key_env`` must look like a key variable or be named on the command line
  (lookahead.consent).
- Min-K% needs the log-probability of every prompt token. Servers offer that in two ways:
  vLLM's ``prompt_logprobs`` extra field on completions, or the legacy completions
  ``echo=True`` with ``logprobs``. ``mink_source: auto`` tries them in that order and stops
  with an error naming this backend when neither is offered.
"""

from __future__ import annotations

import email.utils
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from lookahead.backends.base import Backend, BackendFatal, Generation, QueryFailure, TokenLogprob
from lookahead.backends.token_count import FileTokenCounter, file_tokenizer
from lookahead.config import StudyConfigError
from lookahead.consent import Destination
from lookahead.errors import LookaheadError
from lookahead.masking import install_log_filter, mask, register_secret
from lookahead.settings_sections import BackendSettings
from lookahead.tasks import LOGPROB_TOLERANCE, positive_logprob_reason

if TYPE_CHECKING:  # the client library is imported when a backend is made, not with this module
    from openai.types.shared_params import ResponseFormatJSONSchema

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
MINK_SOURCES = ("auto", "prompt_logprobs", "echo")
APIS = ("completions", "chat")


def fused_route_reason(api_mode: str, mink_source: str) -> str | None:
    """Why a row's forecast and Min-K% cannot share one request to this server (None: they
    can), from the settings alone, before anything is sent: the route must be vLLM's
    ``prompt_logprobs`` extra on completions. Chat: the chat prompt is not the text Min-K%
    scores. ``mink_source: auto``: whether the server offers the extra is known only from
    a reply, and nothing is probed before the confirmation, so the plan counts two requests
    a row, as they will be sent (`vllm serve`: set ``mink_source: prompt_logprobs``)."""
    if api_mode != "completions":
        return f"api_mode '{api_mode}' sends the forecast as a chat message, not the text Min-K% scores"
    if mink_source != "prompt_logprobs":
        return f"mink_source '{mink_source}' (one request per row needs mink_source: prompt_logprobs, as vllm serve offers)"
    return None


class BackendUnsupportedError(BackendFatal):
    """The server lacks a feature the study needs (e.g. prompt log-probabilities)."""


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


class IncompleteReply(LookaheadError):
    """A reply that is not a complete answer: non-JSON or HTML body, a missing field, a
    NaN or infinite log-prob. Retried like a 5xx; never cached.

    ``missing_field`` marks a reply that simply lacks an optional feature's field
    (prompt log-probs): when that persists through every retry on the first Min-K%
    query, the server is taken not to offer the feature on that route."""

    def __init__(self, message: str, missing_field: bool = False) -> None:
        super().__init__(message)
        self.missing_field = missing_field


class RouteUnsupported(LookaheadError):
    """The server rejects a prompt-log-prob route outright (HTTP 400)."""


class Refused(LookaheadError):
    """The server declined to answer this prompt (a content filter): the same request gets
    the same refusal, so it is a permanent failure, not retried."""


#: Prompts a prompt-log-prob route must be rejected for, with none answered over it, before
#: the server is said not to offer it: one prompt the server refuses (a content policy, a
#: prompt too long) is no evidence about the route.
MINK_ROUTE_EVIDENCE = 3


def _first_choice(resp: Any) -> Any:
    """The first choice of a parsed reply; an IncompleteReply for anything else.

    The openai client returns the body as a plain string when the server answers a
    non-JSON content type (an HTML error page with status 200, say)."""
    if isinstance(resp, (str, bytes)) or resp is None:
        raise IncompleteReply("the reply is not JSON")
    choices = getattr(resp, "choices", None)
    if not choices:
        raise IncompleteReply("the reply has no choices")
    if getattr(choices[0], "finish_reason", None) == "content_filter":
        raise Refused("the server refused the content (finish_reason content_filter)")
    return choices[0]


def _finite(value: Any) -> float:
    """A log-prob as a finite float (NaN, infinities and non-numbers are incomplete)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise IncompleteReply(f"log-prob {value!r} is not a number") from None
    if not math.isfinite(number):
        raise IncompleteReply(f"log-prob {value!r} is not finite")
    if number > LOGPROB_TOLERANCE:  # asked again with this reason; within it the cache clamps to 0
        raise IncompleteReply(positive_logprob_reason(number))
    return number


def _text(value: Any) -> str:
    """Response text; a missing (null) text is an incomplete reply, an empty one is not."""
    if value is None or not isinstance(value, str):
        raise IncompleteReply("the reply has no response text")
    return value


def _as_bool(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    raise StudyConfigError(f"setting '{name}': '{value}' is not true or false")


def _as_number(value: Any, name: str, minimum: float) -> float:  # a setting as written: float() decides
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise StudyConfigError(f"setting '{name}': '{value}' is not a number") from None
    if number < minimum:
        raise StudyConfigError(f"setting '{name}': {value} must be at least {minimum}")
    return number


class OpenAIBackend(Backend):
    """Chat or completions against an OpenAI-compatible endpoint, with logprobs.

    Options (study settings): base_url (required), api_mode ('completions' | 'chat'),
    api_key_env (name of the env var holding the key; none for a local server),
    allow_remote (the study's half of the consent to send text off this machine; the
    other half is the command line's, lookahead.consent), concurrency, max_retries,
    timeout_s, backoff_s (doubled per attempt, capped by backoff_max_s): defaults are the
    declared ones (BackendSettings),
    tokenizer_path (a local tokenizer whose chat template renders completions prompts;
    defaults to model_path), served_model (the name the server knows; default model_id),
    mink_source ('auto' | 'prompt_logprobs' | 'echo')."""

    name = "openai"

    def __init__(self, model_id: str, **options: object) -> None:
        super().__init__(model_id, **options)
        s = BackendSettings.with_defaults(**options)
        base_url = s.base_url
        if not base_url or not isinstance(base_url, str):
            raise StudyConfigError("setting 'base_url' is missing (the server's /v1 URL)")
        if urlparse(base_url).scheme not in ("http", "https"):
            raise StudyConfigError(f"setting 'base_url': '{base_url}' is not an http(s) URL")
        allow_remote = _as_bool(s.allow_remote, "allow_remote")
        #: where the prompts and the key go; refused unless the person running the command allowed it
        self.destination = Destination(base_url, str(s.api_key_env) if s.api_key_env else None)
        self.destination.check(allow_remote)
        self.base_url = base_url
        self.api = str(s.api_mode)
        if self.api not in APIS:
            raise StudyConfigError(f"setting 'api_mode': '{self.api}' is not one of {', '.join(APIS)}")
        self.mink_source = str(s.mink_source)
        if self.mink_source not in MINK_SOURCES:
            raise StudyConfigError(f"setting 'mink_source': '{self.mink_source}' is not one of {', '.join(MINK_SOURCES)}")
        self.concurrency = int(_as_number(s.concurrency, "concurrency", 1))
        self.max_retries = int(_as_number(s.max_retries, "max_retries", 0))
        self.timeout_s = _as_number(s.timeout_s, "timeout_s", 0.001)
        self.backoff_s = _as_number(s.backoff_s, "backoff_s", 0)
        self.backoff_max_s = _as_number(s.backoff_max_s, "backoff_max_s", 0)
        self.served_model = str(s.served_model or model_id)
        self.tokenizer_path = s.tokenizer_path or s.model_path
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()  # loaded once, though the request threads ask together
        self._counter: Callable[[str], int] | None = None  # count_tokens' tokenizer, loaded on first use
        self.retries_done = 0  # total retries over the backend's life (for reports and tests)
        self._lock = threading.Lock()

        key_env = s.api_key_env
        if key_env:
            key = os.environ.get(str(key_env))
            if not key:
                raise StudyConfigError(f"setting 'api_key_env': environment variable '{key_env}' is not set")
        else:
            key = "EMPTY"  # local servers without --api-key ignore it
        if key_env:
            register_secret(key)
        install_log_filter()
        self._mink_route: str | None = None  # decided on the first Min-K% query a route answers
        # per route, the prompts it was rejected for while no prompt was answered over it
        self._route_rejections: dict[str, set[str]] = {"prompt_logprobs": set(), "echo": set()}

        import openai  # main venv and .venv-vllm both have it

        self._openai = openai
        self._client = openai.OpenAI(api_key=key, base_url=base_url, timeout=self.timeout_s, max_retries=0)
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="openai")

    # ---------------------------------------------------------------- plumbing
    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIBackend(model_id={self.model_id!r}, base_url={self.base_url!r}, api={self.api!r})"

    def _reason(self, err: BaseException) -> str:
        """One short, masked line saying why an attempt failed."""
        oa = self._openai
        status = getattr(err, "status_code", None)
        if isinstance(err, IncompleteReply):
            text = f"incomplete reply: {err}"
        elif isinstance(err, oa.APITimeoutError):
            text = f"no reply within timeout_s={self.timeout_s:g}"
        elif isinstance(err, oa.APIConnectionError):
            cause = err.__cause__ or err.__context__
            text = f"connection failed ({type(cause).__name__ if cause else 'no reply'})"
        elif status is not None:
            text = f"HTTP {status}"
        elif isinstance(err, ValueError):  # JSONDecodeError and friends
            text = f"malformed reply ({type(err).__name__})"
        else:
            text = f"malformed reply ({type(err).__name__}: {err})"
        return mask(text)[:300]

    def _attempt(self, call: Callable[[], T]) -> T | QueryFailure:
        """Run one query with the retry policy; a QueryFailure when the bound is reached.

        Retried alike, because each is transient on a healthy server: 429/408/409/5xx,
        timeouts, dropped connections, and 200 replies that are not a complete answer
        (non-JSON or HTML bodies, missing fields, NaN or infinite log-probs). Not
        retried: other 4xx (the same request would fail again: a QueryFailure at once),
        and 401/403/404 (bad key, no access, unknown model: BackendFatal, every query
        would fail the same way)."""
        oa = self._openai
        attempt = 0
        while True:
            try:
                return call()
            except (RouteUnsupported, StudyConfigError):
                raise  # not the reply's fault: a route decision, or a setting to fix
            except Refused as err:
                return QueryFailure(mask(str(err)), attempt + 1, err, permanent=True)
            except (oa.AuthenticationError, oa.PermissionDeniedError, oa.NotFoundError) as err:
                raise BackendFatal(
                    mask(
                        f"backend 'openai' ({self.base_url}) refused the request with HTTP "
                        f"{err.status_code} ({type(err).__name__}): check api_key_env, served_model "
                        "and base_url"
                    )
                ) from None
            except (oa.APIError, IncompleteReply, AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
                status = getattr(err, "status_code", None)
                reason = self._reason(err)
                # a 2xx here failed validation: a malformed reply, retried like a 5xx
                retryable = status is None or status < 300 or status in RETRYABLE_STATUS or status >= 500
                if not retryable:  # the same request gets the same reply: recorded once, not retried
                    detail = mask(getattr(err, "message", "") or "")[:200]
                    return QueryFailure(f"{reason}: {detail}" if detail else reason, attempt + 1, err, permanent=True)
                if attempt >= self.max_retries:
                    return QueryFailure(f"{reason} (after {attempt + 1} attempts)", attempt + 1, err)
                wait = min(self.backoff_max_s, self.backoff_s * (2**attempt))
                wait *= 1 + 0.1 * random.random()  # jitter so 8 threads do not retry in step
                response = getattr(err, "response", None)
                after = parse_retry_after(getattr(response, "headers", None))
                if after is not None:
                    wait = max(wait, min(after, self.backoff_max_s * 4))
                log.debug(
                    "backend 'openai': %s (attempt %d of %d), retrying in %.2f s", reason, attempt + 1, self.max_retries + 1, wait
                )
                with self._lock:
                    self.retries_done += 1
                time.sleep(wait)
                attempt += 1

    def _map(self, fn: Callable[[str], T], prompts: Sequence[str]) -> list[T | QueryFailure]:
        """Apply ``fn`` to every prompt with at most ``concurrency`` requests in flight."""
        return list(self._pool.map(lambda p: self._attempt(lambda: fn(p)), prompts))

    @staticmethod
    def _raise_first(results: Sequence[T | QueryFailure]) -> list[T]:
        """The all-or-nothing form: the first failure's exception is raised."""
        for r in results:
            if isinstance(r, QueryFailure):
                if r.error is not None:
                    raise r.error
                raise IncompleteReply(r.reason)
        return [r for r in results if not isinstance(r, QueryFailure)]  # all of them: none failed

    def _tokenizer_or_fail(self) -> Any:
        """transformers' tokenizer of tokenizer_path, loaded on first use under a lock: the
        request threads decode prompt tokens at once, and a first import of transformers
        made by several threads together fails ("cannot import name 'AutoTokenizer'")."""
        if self._tokenizer is not None:
            return self._tokenizer
        if not self.tokenizer_path:
            raise StudyConfigError(
                "setting 'tokenizer_path' is missing: the completions API with "
                "use_chat_template needs a local tokenizer to render the chat template "
                "(or use api: chat, where the server applies it)"
            )
        with self._tokenizer_lock:
            if self._tokenizer is None:
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
        return tok.apply_chat_template([{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True)

    def count_tokens(self, prompt: str) -> int | None:
        """Prompt tokens by the local tokenizer (tokenizer_path / model_path); None without one.

        In chat mode the server adds its chat template around the text, a few tokens more."""
        if not self.tokenizer_path:
            return None
        if self._counter is None:
            # the tokenizer file alone where it counts as transformers does: no torch imported
            # only to count (lookahead.backends.token_count); transformers' tokenizer otherwise
            plain = None if self._tokenizer is not None else file_tokenizer(self.tokenizer_path)
            self._counter = (
                FileTokenCounter(plain) if plain is not None else lambda text: len(self._tokenizer_or_fail().encode(text))
            )
        return self._counter(prompt)

    def generate(self, prompts: Sequence[str], max_tokens: int, top_logprobs: int) -> list[Generation]:
        """Temperature 0; the top-k alternatives at the first generated position."""
        return self._raise_first(self.try_generate(prompts, max_tokens, top_logprobs))

    def try_generate(self, prompts: Sequence[str], max_tokens: int, top_logprobs: int) -> list[Generation | QueryFailure]:
        if self.api == "chat":
            return self._map(lambda p: self._chat_one(p, max_tokens, top_logprobs), prompts)
        return self._map(lambda p: self._completion_one(p, max_tokens, top_logprobs), prompts)

    def _completion_one(self, prompt: str, max_tokens: int, k: int) -> Generation:
        resp = self._client.completions.create(
            model=self.served_model,
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0,
            logprobs=k if k > 0 else None,
        )
        return self._completion_answer(prompt, _first_choice(resp), k)

    def _completion_answer(self, prompt: str, choice: Any, k: int) -> Generation:
        """A completions choice's answer and the top-k at its first generated position."""
        top: list[TokenLogprob] = []
        if k > 0:
            lp = choice.logprobs
            tops = getattr(lp, "top_logprobs", None) if lp is not None else None
            first = tops[0] if tops else None
            if not first:
                raise IncompleteReply("no top log-probs at the first position")
            scored = sorted(((str(tok), _finite(v)) for tok, v in first.items()), key=lambda p: -p[1])
            top = [TokenLogprob(None, tok, lp) for tok, lp in scored]
        return Generation(prompt=prompt, response_text=_text(choice.text), top_logprobs=top)

    def _chat_one(self, prompt: str, max_tokens: int, k: int) -> Generation:
        kwargs: dict[str, Any] = {}
        if k > 0:
            kwargs = {"logprobs": True, "top_logprobs": k}
        resp = self._client.chat.completions.create(
            model=self.served_model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=0,
            **kwargs,
        )
        choice = _first_choice(resp)
        top: list[TokenLogprob] = []
        if k > 0:
            content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
            first = content[0].top_logprobs if content else None
            if not first:
                raise IncompleteReply("no top log-probs at the first position")
            top = [TokenLogprob(None, str(t.token), _finite(t.logprob)) for t in first]
        return Generation(prompt=prompt, response_text=_text(choice.message.content), top_logprobs=top)

    def fused_scoring(self) -> bool:
        """One completions request returns the answer and the prompt's token log-probs
        (vLLM's ``prompt_logprobs`` extra beside ``logprobs``) where the settings say so
        (:func:`fused_route_reason`), or an earlier Min-K% query of this run found that
        route under ``mink_source: auto``."""
        return fused_route_reason(self.api, self.mink_source) is None

    def generate_scored(
        self, prompts: Sequence[str], max_tokens: int, top_logprobs: int, vocab_moments: bool = False
    ) -> list[tuple[Generation, list[TokenLogprob]]]:
        """:meth:`try_generate_scored`, all or nothing."""
        return self._raise_first(self.try_generate_scored(prompts, max_tokens, top_logprobs, vocab_moments))

    def try_generate_scored(
        self, prompts: Sequence[str], max_tokens: int, top_logprobs: int, vocab_moments: bool = False
    ) -> list[tuple[Generation, list[TokenLogprob]] | QueryFailure]:
        """Per prompt, :meth:`generate`'s answer and :meth:`prompt_logprobs`' entries from
        one completions request (``prompt_logprobs=0`` and ``return_token_ids`` as extras
        beside ``logprobs``: vLLM scores the prompt in the prefill the answer decodes
        from). Failures are per query, with the retry policy of every request here. The
        server's HTTP 400 for a prompt is that prompt's permanent failure once the route
        has answered a prompt; before that it is evidence about the route, as for
        :meth:`try_prompt_logprobs`: rejected for MINK_ROUTE_EVIDENCE prompts with none
        answered, the server is taken not to offer it (BackendUnsupportedError)."""
        if vocab_moments:
            raise StudyConfigError(
                "Min-K%++ needs log-prob moments over the vocabulary, which an OpenAI-compatible server does not return"
            )
        if not self.fused_scoring():
            raise NotImplementedError("backend 'openai' answers and scores a prompt in one request over prompt_logprobs only")

        def one(prompt: str) -> tuple[Generation, list[TokenLogprob]] | QueryFailure:
            try:
                out = self._scored_one(prompt, max_tokens, top_logprobs)
            except RouteUnsupported as exc:
                if self._mink_route is not None:
                    raise Refused(f"the server rejected prompt_logprobs for this prompt ({exc})") from None
                self._route_rejected("prompt_logprobs", prompt)
                with self._lock:
                    seen = len(self._route_rejections["prompt_logprobs"])
                if seen >= MINK_ROUTE_EVIDENCE and self._mink_route is None:
                    raise BackendUnsupportedError(
                        f"backend 'openai' ({self.base_url}) rejected prompt_logprobs for {seen} prompts and "
                        "answered none (mink_source: prompt_logprobs); set mink_source: auto or echo, or use "
                        "lap_measure: recall"
                    ) from None
                return QueryFailure("prompt log-probs rejected for this prompt while the route was not confirmed; asked again")
            with self._lock:
                self._mink_route = "prompt_logprobs"
            return out

        return self._map(one, prompts)

    def _scored_one(self, prompt: str, max_tokens: int, k: int) -> tuple[Generation, list[TokenLogprob]]:
        try:
            resp = self._client.completions.create(
                model=self.served_model,
                prompt=prompt,
                max_tokens=max_tokens,
                temperature=0,
                logprobs=k if k > 0 else None,
                extra_body={"prompt_logprobs": 0, "return_token_ids": True},
            )
        except self._openai.BadRequestError:
            raise RouteUnsupported("HTTP 400") from None
        choice = _first_choice(resp)
        return self._completion_answer(prompt, choice, k), self._vllm_prompt_entries(choice)

    @property
    def generate_json(self) -> Callable[[Sequence[str], int, dict[str, Any]], list[Generation]] | None:
        """Schema-constrained generation (chat API ``response_format`` json_schema), or
        None on the completions API, where OpenAI has no such parameter; callers then
        validate the free answer themselves (llm_jobs.claims_extract)."""
        if self.api != "chat":
            return None
        return self._generate_json

    def _generate_json(self, prompts: Sequence[str], max_tokens: int, schema: dict[str, Any]) -> list[Generation]:
        fmt: ResponseFormatJSONSchema = {
            "type": "json_schema",
            "json_schema": {"name": "extraction", "schema": schema, "strict": True},
        }

        def one(prompt: str) -> Generation:
            resp = self._client.chat.completions.create(
                model=self.served_model,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=max_tokens,
                temperature=0,
                response_format=fmt,
            )
            return Generation(prompt=prompt, response_text=resp.choices[0].message.content or "")

        return self._raise_first(self._map(one, prompts))  # all or nothing, as ``generate``

    def prompt_logprobs(self, prompts: Sequence[str]) -> list[list[TokenLogprob]]:
        """Log-probability of each prompt token (first None), via whatever the server offers."""
        return self._raise_first(self.try_prompt_logprobs(prompts))

    def try_prompt_logprobs(self, prompts: Sequence[str], vocab_moments: bool = False) -> list[list[TokenLogprob] | QueryFailure]:
        """Per-prompt token log-probs; a prompt without a complete answer is a QueryFailure.

        The route (vLLM's prompt_logprobs or legacy echo) is decided by the first prompt a
        route answers. A route is unsupported only on evidence across prompts: rejected
        (HTTP 400, or the field never included within the retry bound) for
        MINK_ROUTE_EVIDENCE different prompts with none answered. Until then a prompt that
        every route rejects is a failure of that prompt alone, asked again (the route was
        not known yet); once the route is known, the server's 400 for a prompt over it is
        that prompt's permanent failure. ``vocab_moments`` (Min-K%++) a server does not
        return: lookahead.measures refuses that measure for this backend before any query."""
        if vocab_moments:
            raise StudyConfigError(
                "Min-K%++ needs log-prob moments over the vocabulary, which an OpenAI-compatible server does not return"
            )
        if not prompts:
            return []
        if self._mink_route is not None:
            return self.try_prompt_logprobs_rest(prompts, self._mink_route)
        order = {"auto": ("prompt_logprobs", "echo"), "prompt_logprobs": ("prompt_logprobs",), "echo": ("echo",)}[
            self.mink_source
        ]
        prompt = prompts[0]
        for source in order:
            fn = self._prompt_lp_vllm if source == "prompt_logprobs" else self._prompt_lp_echo
            try:
                first = self._attempt(lambda: fn(prompt))
            except RouteUnsupported:
                self._route_rejected(source, prompt)
                continue
            if isinstance(first, QueryFailure) and isinstance(first.error, IncompleteReply) and first.error.missing_field:
                self._route_rejected(source, prompt)  # never returned the field for this prompt
                continue
            if isinstance(first, QueryFailure):
                # transient trouble (5xx, resets): the route is still unknown
                return [first, *self.try_prompt_logprobs_rest(prompts[1:], None)]
            with self._lock:
                self._mink_route = source
                self.mink_source = source
            return [first, *self.try_prompt_logprobs_rest(prompts[1:], source)]
        with self._lock:
            counts = {s: len(self._route_rejections[s]) for s in order}
            known = self._mink_route
        if known is not None:  # another prompt found the route meanwhile: this one's refusal is its own
            return self.try_prompt_logprobs_rest(prompts, known)
        if min(counts.values()) >= MINK_ROUTE_EVIDENCE:
            seen = ", ".join(f"{s} for {n} prompts" for s, n in counts.items())
            raise BackendUnsupportedError(
                f"backend 'openai' ({self.base_url}) offers no prompt token log-probabilities "
                f"(tried: {', '.join(order)}; rejected {seen}, none answered); Min-K% needs them. "
                "Use lap_measure: recall, or the vllm or transformers backend."
            )
        failure = QueryFailure(
            f"prompt log-probs rejected for this prompt ({', '.join(order)}) while no route was known; asked again", 1, None
        )
        return [failure, *self.try_prompt_logprobs_rest(prompts[1:], None)]

    def _route_rejected(self, source: str, prompt: str) -> None:
        """Count one prompt's rejection of a prompt-log-prob route (the evidence
        :meth:`try_prompt_logprobs` needs before it calls the route unsupported)."""
        with self._lock:
            self._route_rejections[source].add(prompt)

    def try_prompt_logprobs_rest(self, prompts: Sequence[str], source: str | None) -> list[list[TokenLogprob] | QueryFailure]:
        """The remaining prompts over a known route (or, with None, probe each in turn)."""
        if not prompts:
            return []
        if source is None:
            return [*self.try_prompt_logprobs(prompts[:1]), *self.try_prompt_logprobs(prompts[1:])]
        fn = self._prompt_lp_vllm if source == "prompt_logprobs" else self._prompt_lp_echo

        def one(prompt: str) -> list[TokenLogprob]:
            try:
                return fn(prompt)
            except RouteUnsupported as exc:  # a route others answer: this prompt's own refusal
                raise Refused(f"the server rejected {source} for this prompt ({exc})") from None

        return self._map(one, prompts)

    def _prompt_lp_vllm(self, prompt: str) -> list[TokenLogprob]:
        """vLLM's completions extra field prompt_logprobs=0: each dict holds the actual token.

        ``return_token_ids`` asks vLLM for the prompt's token ids too, so the first token
        (which has no log-prob) still gets its id."""
        try:
            resp = self._client.completions.create(
                model=self.served_model,
                prompt=prompt,
                max_tokens=1,
                temperature=0,
                extra_body={"prompt_logprobs": 0, "return_token_ids": True},
            )
        except self._openai.BadRequestError:
            raise RouteUnsupported("HTTP 400") from None  # the server rejects the unknown field
        return self._vllm_prompt_entries(_first_choice(resp))

    def _vllm_prompt_entries(self, choice: Any) -> list[TokenLogprob]:
        """A completions choice's ``prompt_logprobs`` (vLLM's extra, asked with value 0 and
        ``return_token_ids``) as one entry per prompt token, the first without a log-prob."""
        extra = choice.model_extra or {}
        raw = getattr(choice, "prompt_logprobs", None) or extra.get("prompt_logprobs")
        if not raw:
            raise IncompleteReply("reply has no prompt_logprobs", missing_field=True)
        ids = getattr(choice, "prompt_token_ids", None) or extra.get("prompt_token_ids") or []
        out: list[TokenLogprob] = []
        for i, entry in enumerate(raw):
            if i == 0:
                tid = int(ids[i]) if i < len(ids) else None
                out.append(TokenLogprob(tid, self._token_text(tid), None))
                continue
            if not entry:
                raise IncompleteReply(f"prompt token {i} has no log-prob")
            # prompt_logprobs=0 makes vLLM return exactly one entry: the actual prompt token.
            key, info = next(iter(entry.items()))
            if isinstance(info, dict):
                logprob, token = info.get("logprob"), info.get("decoded_token")
            else:
                logprob, token = info, None
            tid = int(key)
            out.append(TokenLogprob(tid, token if token is not None else self._token_text(tid), _finite(logprob)))
        return out

    def _token_text(self, token_id: int | None) -> str:
        """Decoded text of a token id when a local tokenizer is configured, else ''."""
        if token_id is None or not self.tokenizer_path:
            return ""
        return str(self._tokenizer_or_fail().decode([token_id]))

    def _prompt_lp_echo(self, prompt: str) -> list[TokenLogprob]:
        """Legacy completions echo=True with logprobs: prompt tokens come back with theirs."""
        try:
            resp = self._client.completions.create(
                model=self.served_model,
                prompt=prompt,
                max_tokens=1,
                temperature=0,
                echo=True,
                logprobs=0,
            )
        except self._openai.BadRequestError:
            raise RouteUnsupported("HTTP 400") from None
        lp = _first_choice(resp).logprobs
        if lp is None or not lp.tokens or not lp.token_logprobs:
            raise IncompleteReply("reply has no echoed token log-probs", missing_field=True)
        # echo returns prompt tokens then the generated one; keep the prompt part, which is
        # the prefix whose text offsets lie inside the prompt.
        n = len(lp.tokens)
        if lp.text_offset:
            n = sum(1 for off in lp.text_offset if off < len(prompt))
        else:
            n -= 1
        values = lp.token_logprobs[:n]
        if n < 1 or len(values) < n:
            raise IncompleteReply("echoed log-probs do not cover the prompt")
        return [
            TokenLogprob(None, str(tok), None if i == 0 else _finite(v))
            for i, (tok, v) in enumerate(zip(lp.tokens[:n], values, strict=False))
        ]

    def sample(self, prompts: Sequence[str], n: int, seed: int, max_tokens: int) -> list[list[str]]:
        """Fallback without logprobs: n answers at temperature 1 with a fixed seed."""
        return self._raise_first(self.try_sample(prompts, n, seed, max_tokens))

    def try_sample(self, prompts: Sequence[str], n: int, seed: int, max_tokens: int) -> list[list[str] | QueryFailure]:
        """``sample`` with a QueryFailure in place of a query that got no complete answer."""
        if n < 25:
            raise StudyConfigError(f"setting 'n_samples': {n} is below the protocol's 25")

        def one(prompt: str) -> list[str]:
            if self.api == "chat":
                chat = self._client.chat.completions.create(
                    model=self.served_model,
                    messages=[{"role": "user", "content": prompt}],
                    max_tokens=max_tokens,
                    temperature=1,
                    n=n,
                    seed=seed,
                )
                texts = [_text(c.message.content) for c in sorted(chat.choices, key=lambda c: c.index)]
            else:
                resp = self._client.completions.create(
                    model=self.served_model,
                    prompt=prompt,
                    max_tokens=max_tokens,
                    temperature=1,
                    n=n,
                    seed=seed,
                )
                texts = [_text(c.text) for c in sorted(resp.choices, key=lambda c: c.index)]
            if len(texts) != n:
                raise IncompleteReply(f"{len(texts)} samples returned, not n={n}")
            return texts

        return self._map(one, prompts)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()
