"""Counting prompt tokens with the `tokenizers` library alone, where that gives exactly
what transformers' tokenizer gives.

Why: an API backend (openai) counts every pending prompt against the context length
with the local tokenizer named by tokenizer_path. Loading it through transformers'
AutoTokenizer imports torch (about 290 MB of a job's memory, measured at a million rows
in BENCHMARKS.md "Job memory at a million rows") only to count. transformers' fast
tokenizer is the `tokenizers` library's Tokenizer read from ``tokenizer.json``; for a
tokenizer of the generic class, whose settings add nothing to that file, the two encode
alike, and the file alone is read here.

Where transformers would change the file's tokenizer, this module declines (returns
None) and the backend keeps transformers: a model-specific tokenizer class (it may
rebuild the pipeline from the vocabulary), ``add_bos_token``/``add_eos_token`` (it
rewrites the post-processor), a special token that the file lacks (it adds it), a
file without a post-processor, ``split_special_tokens``, or a vocabulary over 100,000
(transformers may patch its pre-tokenizer's pattern). tests/python/test_token_count.py
checks the counts against transformers' on the demo tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: tokenizer_config.json classes that load tokenizer.json as it is (transformers'
#: TokenizersBackend, and its name before version 5).
GENERIC_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
#: Settings of tokenizer_config.json under which transformers changes the file's tokenizer.
CHANGING_SETTINGS = ("add_bos_token", "add_eos_token", "split_special_tokens", "post_processor", "tokenizer_file")
#: Special-token settings: each named token must be in the file already.
SPECIAL_TOKEN_SETTINGS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
#: Above this vocabulary transformers may patch the pre-tokenizer (its Mistral fix).
MAX_PLAIN_VOCAB = 100_000


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def file_tokenizer(path: str | Path) -> Any | None:
    """The `tokenizers` Tokenizer of the folder ``path`` (its tokenizer.json) when it encodes
    exactly as transformers' AutoTokenizer of that folder would; None otherwise (no such
    file, or a tokenizer transformers changes: see the module's docstring)."""
    folder = Path(path)
    file, config_file = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if not (folder.is_dir() and file.is_file() and config_file.is_file()):
        return None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        spec = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not isinstance(spec, dict):
        return None
    if config.get("tokenizer_class") not in GENERIC_CLASSES or any(k in config for k in CHANGING_SETTINGS):
        return None
    if spec.get("post_processor") is None or spec.get("truncation") or spec.get("padding"):
        return None
    in_file = {t.get("content") for t in spec.get("added_tokens") or [] if isinstance(t, dict)}
    named = [_token_text(config.get(k)) for k in SPECIAL_TOKEN_SETTINGS]
    named += [_token_text(t) for t in (config.get("added_tokens_decoder") or {}).values()]
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    named += [_token_text(t) for t in (extra.values() if isinstance(extra, dict) else extra)]
    if any(t is not None and t not in in_file for t in named):
        return None
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(file))
    if tok.get_vocab_size() > MAX_PLAIN_VOCAB:
        return None
    return tok


class FileTokenCounter:
    """Prompt tokens as transformers' ``len(tokenizer.encode(text))`` counts them (special
    tokens added by the post-processor), from the `tokenizers` library alone."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer

    def __call__(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=True).ids)
