"""Exact recall label probabilities on transformers (setting recall_probabilities).

Checked against a hand-written softmax of the model's own logits (the shipped demo model,
no download): a single-token label's probability is the sum of softmax probabilities of
every vocabulary token that spells it; a two-token label's is the product of the two
conditional softmax probabilities, each from its own forward pass. To 1e-6."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from lazy_module import lazy_module

torch = lazy_module("torch")  # imported by the first test that runs, not at collection
transformers = lazy_module("transformers")

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "demo" / "models" / "contaminated"
PROMPT = (
    "On 2021-08-04, did the closing stock price of Lumtria Robotics (LUMR) go up or down compared to "
    "the previous trading day?\nAnswer based only on what you recall about Lumtria Robotics (LUMR) on "
    'that specific date. If you do not recall, answer "unknown".\nRespond with exactly one word and '
    "nothing else: up, down, or unknown."
)


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    e = [math.exp(x - top) for x in logits]
    z = math.fsum(e)
    return [x / z for x in e]


@pytest.fixture(scope="module")
def model_and_tokenizer():
    tok = transformers.PreTrainedTokenizerFast.from_pretrained(str(MODEL))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(MODEL)).eval()
    return model, tok


def next_probs(model, ids: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double().tolist()
    return softmax(logits)


def test_exact_probabilities_equal_a_hand_written_softmax(model_and_tokenizer):
    from lookahead.backends.transformers_backend import TransformersBackend

    model, tok = model_and_tokenizer
    labels = {"up": "up", "down": "down", "unknown": "closed up"}  # the last is two tokens here
    assert len(tok.tokenize(" closed up")) == 2
    backend = TransformersBackend("demo-contaminated", model_path=str(MODEL))
    got = {e["role"]: e for e in backend.label_logprobs([PROMPT, PROMPT + " "], labels)[0]}

    ids = tok.encode(PROMPT)
    p = next_probs(model, ids)
    for role in ("up", "down"):
        spelled = [v for v in range(len(tok)) if tok.decode([v]).strip().lower() == labels[role]]
        assert spelled and got[role]["method"] == "vocabulary" and got[role]["token_ids"] == spelled
        want = math.fsum(p[v] for v in spelled)
        assert math.exp(got[role]["logprob"]) == pytest.approx(want, abs=1e-6, rel=1e-6)

    full = tok.encode(PROMPT + " closed up")
    first, second = full[len(ids)], full[len(ids) + 1]
    assert full[: len(ids)] == ids and len(full) == len(ids) + 2
    want2 = p[first] * next_probs(model, [*ids, first])[second]
    assert got["unknown"]["method"] == "teacher_forced" and got["unknown"]["token_ids"] == [first, second]
    assert math.exp(got["unknown"]["logprob"]) == pytest.approx(want2, abs=1e-6, rel=1e-6)


def test_recall_scores_read_exact_lines_uncensored():
    from lookahead.scoring import recall_scores

    line = {
        "top_logprobs": [],
        "label_logprobs": [
            {"role": "up", "label": "up", "logprob": math.log(0.3)},
            {"role": "down", "label": "down", "logprob": math.log(0.2)},
            {"role": "unknown", "label": "unknown", "logprob": math.log(1e-9)},
        ],
    }
    s = recall_scores(line, {"up": "up", "down": "down", "unknown": "unknown"})
    assert s.p_up == pytest.approx(0.3) and s.p_down == pytest.approx(0.2) and not s.censored


def test_the_setting_keeps_top_logprobs_keys_and_refuses_exact_where_unavailable():
    from lookahead.config import load_study
    from lookahead.errors import StudyConfigError
    from lookahead.keys import recall_probabilities, task_params

    exact = load_study(overrides={"backend": "transformers"})
    top = load_study(overrides={"backend": "transformers", "recall_probabilities": "top_logprobs"})
    assert recall_probabilities(exact) == "exact" and task_params(exact, "recall")["recall_probabilities"] == "exact"
    assert "recall_probabilities" not in task_params(top, "recall")  # same params, same keys as before
    api = load_study(overrides={"backend": "openai", "base_url": "http://127.0.0.1:9/v1"})
    assert recall_probabilities(api) == "top_logprobs"
    with pytest.raises(StudyConfigError, match="recall_probabilities"):
        recall_probabilities(
            load_study(overrides={"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "recall_probabilities": "exact"})
        )
