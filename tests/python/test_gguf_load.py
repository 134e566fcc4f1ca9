"""Loading from a GGUF file: parsed once for the tokenizer, the config and the weights
(lookahead.backends.transformers_backend._gguf_parsed_once), and the same model either way.

transformers parses the whole file again for each of the three, and builds gguf's
tensor-name map again for every submodule; the backend shares one parse and one map per
architecture while it loads, then puts gguf's functions back."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from lookahead.backends.transformers_backend import _gguf_parsed_once


def tiny_gguf(path: Path) -> Path:
    """A real GGUF file of one tensor, written by gguf's own writer."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(4, 3))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def counted_parses(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], type]:
    """(the paths gguf parses from now on, one entry a parse; the counting reader class
    installed as gguf.GGUFReader for the test)."""
    parses: list[str] = []

    class CountingReader(gguf.GGUFReader):
        def __init__(self, *args, **kwargs):
            parses.append(str(args[0]))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    return parses, CountingReader


def test_a_gguf_file_is_parsed_once_while_loading_and_gguf_is_put_back(tmp_path, monkeypatch):
    path = tiny_gguf(tmp_path / "tiny.gguf")
    parses, CountingReader = counted_parses(monkeypatch)
    name_map = gguf.get_tensor_name_map
    readers: dict = {}
    with _gguf_parsed_once(readers):
        first, second = gguf.GGUFReader(path), gguf.GGUFReader(str(path))  # a path or its text: one file
        assert first is second and parses == [str(path)]
        assert [t.name for t in first.tensors] == ["token_embd.weight"]
        assert np.array_equal(np.asarray(first.tensors[0].data).reshape(4, 3), np.arange(12, dtype=np.float32).reshape(4, 3))
        # another mode than a plain read is its own reader, never shared
        assert gguf.GGUFReader(path, "c") is not first and len(parses) == 2
        # the name map: built once per (architecture, blocks), each an equal map
        a = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is a
        assert a.get_name("model.embed_tokens") == name_map(gguf.MODEL_ARCH.LLAMA, 2).get_name("model.embed_tokens")
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 3) is not a
    assert gguf.GGUFReader is CountingReader and gguf.get_tensor_name_map is name_map  # put back
    assert list(readers) == [str(path)]  # the backend's to drop once its weights are in
    gguf.GGUFReader(path)
    assert len(parses) == 3  # outside the load every read parses again, as gguf does


def test_put_back_when_the_load_fails(tmp_path):
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with pytest.raises(FileNotFoundError), _gguf_parsed_once({}):
        gguf.GGUFReader(tmp_path / "missing.gguf")
    assert gguf.GGUFReader is reader_class and gguf.get_tensor_name_map is name_map


@pytest.mark.slow  # SmolLM2 loaded twice from its GGUF: about 40 s
def test_the_backend_loads_the_model_and_tokenizer_plain_transformers_loads():
    """The reference is transformers' own load, each part parsing the file itself."""
    import sys

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from llm_workload import SMOLLM2_GGUF, smollm2_dir

    from lookahead.backends.transformers_backend import TransformersBackend

    folder = str(smollm2_dir())
    backend = TransformersBackend("smollm2", model_path=folder, gguf_file=SMOLLM2_GGUF)
    assert backend.context_length() == 8192
    mine, tok = backend.model.state_dict(), backend.tokenizer
    plain = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, gguf_file=SMOLLM2_GGUF).state_dict()
    plain_tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    assert mine.keys() == plain.keys()
    assert all(torch.equal(mine[k], plain[k]) for k in plain)
    assert tok.get_vocab() == plain_tok.get_vocab()
    text = "Headline about Acme (ACME) on 2024-03-01: shares rose after record quarterly earnings."
    assert tok.encode(text) == plain_tok.encode(text)
