"""Secrets never leave the process in clear text: one registry, one ``mask`` function.

Why a registry: an API key can surface in many places the tool does not write itself,
such as an exception message from the HTTP client that quotes a server's 401 body, a
library's debug log or a failure reason stored in ``<task>.failures.jsonl``. Every path
that prints or writes a message passes it through ``mask`` (the job's stdout/stderr
wrapper, the log filter, the failures file), so registering the key once, where it is
read from the environment, covers all of them.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, TextIO

MASK = "***"
_lock = threading.Lock()
_secrets: set[str] = set()

# Loggers whose records may quote request headers or bodies.
MASKED_LOGGERS = ("openai", "httpx", "httpx2", "httpcore", "httpcore2", "lookahead", "llm_jobs")


def register_secret(secret: str | None) -> None:
    """Mask ``secret`` from now on (short values are ignored: they would mask ordinary text)."""
    if secret and len(secret) >= 6:
        with _lock:
            _secrets.add(secret)


def mask(text: Any) -> str:
    """``text`` as a string with every registered secret replaced by ``***``."""
    s = str(text)
    for secret in _secrets:
        if secret in s:
            s = s.replace(secret, MASK)
    return s


class MaskFilter(logging.Filter):
    """Replaces every registered secret in a log record before it is emitted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _secrets:
            return True
        msg = record.getMessage()
        masked = mask(msg)
        if masked != msg:
            record.msg = masked
            record.args = None
        return True


_FILTER = MaskFilter()


def install_log_filter() -> None:
    """Attach the mask to the loggers that may quote a key (idempotent)."""
    for name in MASKED_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    root = logging.getLogger()
    for handler in root.handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)


class MaskedStream:
    """A text stream proxy that masks secrets in everything written through it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(mask(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
