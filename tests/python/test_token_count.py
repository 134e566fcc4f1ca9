"""The openai backend counts prompt tokens from the tokenizer file alone (the `tokenizers`
library, no torch) where that counts exactly as transformers' tokenizer does, and keeps
transformers where it would not (lookahead.backends.token_count)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_TOKENIZER = ROOT / "demo" / "models" / "contaminated"

TEXTS = [
    "",
    " ",
    "\n\n",
    "up",
    "Up DOWN",
    "Headline about Firm 5 (F5) on 2021-06-06: Firm 5 reports item 5\n"
    "Will the stock price of Firm 5 go up or down on the next trading day?\nAnswer with exactly one word: up or down.",
    "Ünïcödé naïve café — “quotes” ‘and’ … ellipsis",
    "ﬁnancial ﬂows ① ② Ⅻ ＡＢＣ １２３",
    "株価は上がる？ 下がる？",
    "Emoji 📈📉 🚀",
    "tabs\tand\r\ncarriage returns",
    "</s> <pad> <unk> literal special tokens </s>",
    "2021-13-45 1999-01-01 20210606 12,345.67%",
    "a" * 5000,
    "word " * 2000,
    "mixed-case HyPhEn-ated e.g. U.S.A.",
    "\u00a0non-breaking\u2009thin\u200bzero-width",
    "Ǆ ǅ ǆ İ ß ẞ",
    "\x00\x01 control \x7f chars",
]


def transformers_counts(folder: Path, texts: list[str]) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    return [len(tok.encode(t)) for t in texts]


def test_file_counts_equal_transformers_counts_on_the_demo_tokenizer() -> None:
    from lookahead.backends.token_count import FileTokenCounter, file_tokenizer

    plain = file_tokenizer(DEMO_TOKENIZER)
    assert plain is not None, "the demo tokenizer is the generic kind: read from its file alone"
    count = FileTokenCounter(plain)
    assert [count(t) for t in TEXTS] == transformers_counts(DEMO_TOKENIZER, TEXTS)
    assert count("word " * 2000) == 2000  # a count, not a cut at some maximum length


def test_openai_backend_counts_as_transformers_with_and_without_a_chat_template(tmp_path: Path) -> None:
    """The backend's count_tokens equals transformers' count of the same text, the text sent
    with a chat template included (the template is transformers', loaded only for it)."""
    from lookahead.backends.openai_backend import OpenAIBackend

    folder = tmp_path / "tok"
    shutil.copytree(DEMO_TOKENIZER, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = (
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    plain = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", tokenizer_path=str(DEMO_TOKENIZER))
    assert [plain.count_tokens(t) for t in TEXTS] == transformers_counts(DEMO_TOKENIZER, TEXTS)
    assert plain._tokenizer is None  # counted without loading transformers' tokenizer
    chat = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", tokenizer_path=str(folder))
    sent = [chat.render_prompt(t, use_chat_template=True) for t in TEXTS]
    assert all(s.startswith("<s>user: ") and s.endswith("assistant:") for s in sent)
    assert [chat.count_tokens(s) for s in sent] == transformers_counts(folder, sent)


@pytest.mark.parametrize(
    "change",
    [
        {"add_bos_token": True},
        {"tokenizer_class": "LlamaTokenizer"},
        {"bos_token": "<s>"},
        {"split_special_tokens": True},
    ],
)
def test_a_tokenizer_transformers_would_change_is_left_to_transformers(tmp_path: Path, change: dict[str, Any]) -> None:
    """Settings under which transformers builds another tokenizer than the file's: the file
    alone is not used (and the backend's counts still equal transformers')."""
    from lookahead.backends.openai_backend import OpenAIBackend
    from lookahead.backends.token_count import file_tokenizer

    folder = tmp_path / "tok"
    shutil.copytree(DEMO_TOKENIZER, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **change}), encoding="utf-8")
    assert file_tokenizer(folder) is None
    if "tokenizer_class" not in change:  # transformers loads the others: the backend counts as it does
        backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", tokenizer_path=str(folder))
        assert [backend.count_tokens(t) for t in TEXTS[:8]] == transformers_counts(folder, TEXTS[:8])


def test_counting_imports_no_torch() -> None:
    """In a fresh process: the backend counts prompt tokens and torch is never imported."""
    code = (
        "import sys\n"
        "from lookahead.backends.openai_backend import OpenAIBackend\n"
        f"b = OpenAIBackend('m', base_url='http://127.0.0.1:9/v1', tokenizer_path={str(DEMO_TOKENIZER)!r})\n"
        "assert b.count_tokens('Firm 5 reports item 5') == 5\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "False"]
