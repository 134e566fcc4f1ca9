"""Scoring rules on hand-worked cases and against a plain numpy recomputation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lookahead.prompts import PromptError, render_forecast, render_recall
from lookahead.scoring import (
    label_probability,
    mink_lap,
    normalize_response,
    parse_forecast,
    parse_stated_confidence,
    prompt_asks_confidence,
    recall_scores,
    sample_frequency,
)


def tl(token_id, token, logprob):
    return {"token_id": token_id, "token": token, "logprob": logprob}


TOP = [
    tl(10, " Up", math.log(0.30)),
    tl(11, "up", math.log(0.20)),
    tl(10, " Up", math.log(0.30)),  # repeated token id: counted once
    tl(12, "upward", math.log(0.10)),  # not equal to the label after strip/lower
    tl(13, " down\n", math.log(0.05)),
    tl(14, "unknown", math.log(0.01)),
]


def test_label_probability_rule():
    assert label_probability(TOP, "up") == pytest.approx(0.50)
    assert label_probability(TOP, "UP ") == pytest.approx(0.50)
    assert label_probability(TOP, "down") == pytest.approx(0.05)
    assert label_probability(TOP, "unknown") == pytest.approx(0.01)
    assert label_probability(TOP, "flat") is None  # censored, not zero
    assert label_probability([], "up") is None


def test_recall_scores_no_renormalisation_and_censoring():
    s = recall_scores({"top_logprobs": TOP[:3]}, {"up": "up", "down": "down", "unknown": "unknown"})
    assert s.p_up == pytest.approx(0.5) and s.p_down is None and s.p_unknown is None
    assert s.censored == ("down", "unknown")
    assert s.lap == pytest.approx(0.5) and s.ud == pytest.approx(0.5)
    full = recall_scores({"top_logprobs": TOP}, {"up": "up", "down": "down", "unknown": "unknown"})
    assert full.lap == pytest.approx(0.55) and full.ud == pytest.approx(0.45) and not full.censored


def test_sampling_frequencies():
    samples = ["up"] * 10 + [" Down"] * 5 + ["maybe"] * 10
    rec = {"samples": samples, "top_logprobs": [], "approximated": True}
    s = recall_scores(rec, {"up": "up", "down": "down", "unknown": "unknown"})
    assert (s.p_up, s.p_down, s.p_unknown) == (0.4, 0.2, 0.0) and s.approximated
    assert sample_frequency(["a"], "a") == 1.0
    with pytest.raises(ValueError):
        sample_frequency([], "up")


def reference_mink(lps, k, mean):
    """Independent: numpy sort of the non-first tokens, floor(k n) at least 1."""
    arr = np.asarray(lps[1:], dtype=float)
    m = max(1, int(np.floor(k * len(arr))))
    low = np.sort(arr)[:m]
    return float(np.exp(low.mean())) if mean == "geometric" else float(np.exp(low).mean())


@pytest.mark.parametrize("n", [2, 3, 5, 9, 10, 11, 57])
@pytest.mark.parametrize("mean", ["geometric", "arithmetic"])
def test_mink_against_numpy(n, mean):
    rng = np.random.default_rng(n)
    lps = [None, *(-rng.exponential(2.0, n - 1)).tolist()]
    assert mink_lap(lps, 0.2, mean) == pytest.approx(reference_mink(lps, 0.2, mean), rel=1e-12)


def test_mink_hand_cases():
    lps = [None, -1.0, -2.0, -3.0, -4.0, -5.0, -0.5, -0.1, -0.2, -0.3, -0.4]  # n=10 -> 2 lowest
    assert mink_lap(lps) == pytest.approx(math.exp(-4.5))
    assert mink_lap(lps, mean="arithmetic") == pytest.approx((math.exp(-5) + math.exp(-4)) / 2)
    assert mink_lap([None, -2.0]) == pytest.approx(math.exp(-2.0))  # at least one token
    assert mink_lap([None]) is None
    assert mink_lap(lps, k=1.0) == pytest.approx(math.exp(np.mean(lps[1:])))
    with pytest.raises(ValueError):
        mink_lap(lps, k=0)


LABELS = {"up": 1, "down": -1}
MULTI = {"significantly increase": 2, "increase": 1, "decrease": -1, "significantly decrease": -2, "no change": 0}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("up", ("up", 1.0)),
        ("Up.", ("up", 1.0)),
        ("  DOWN\n", ("down", -1.0)),
        ("The stock will go up.", ("up", 1.0)),
        ("Down - the headline is negative", ("down", -1.0)),
        ("up or down", ("up", 1.0)),  # starts with a label: that label
        ("It could go up or down", (None, None)),  # ambiguous: never guessed
        ("upward", (None, None)),  # whole words only
        ("", (None, None)),
        (None, (None, None)),
    ],
)
def test_parse_forecast_simple(text, expected):
    assert parse_forecast(text, LABELS) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Significantly increase", ("significantly increase", 2.0)),
        ("I expect it to significantly increase.", ("significantly increase", 2.0)),
        ("increase", ("increase", 1.0)),
        ("Prices will increase slightly", ("increase", 1.0)),
        ("no change expected", ("no change", 0.0)),
        ("significantly decrease, not increase", ("significantly decrease", -2.0)),
        ("it may increase or decrease", (None, None)),
    ],
)
def test_parse_forecast_multiword_longest_match(text, expected):
    assert parse_forecast(text, MULTI) == expected


def test_numeric_labels_keep_sign():
    assert parse_forecast("-1", {"1": 1, "-1": -1}) == ("-1", -1.0)
    assert parse_forecast("+1.", {"+1": 1, "-1": -1}) == ("+1", 1.0)
    assert normalize_response("Up, 0.8!") == "up 0.8"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("up. Confidence: 80%", 0.8),
        ("down (confidence 0.65)", 0.65),
        ("Up with 70 percent probability", 0.7),
        ("up, 90%", 0.9),
        ("up", None),
        ("confidence: 250", None),
    ],
)
def test_stated_confidence(text, expected):
    got = parse_stated_confidence(text)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_prompt_asks_confidence():
    assert prompt_asks_confidence("Answer up or down and give your confidence (0-100%).")
    assert not prompt_asks_confidence("Answer with exactly one word: up or down.")


def test_render_forecast_verbatim_and_errors():
    row = {"text": "Beats {estimates}", "entity_name": "Acme", "ticker": "", "text_date": "2021-01-04"}
    t = 'JSON: {"a": 1}\n{entity_name} ({ticker}) on {text_date}: {text}'
    assert render_forecast(t, row) == 'JSON: {"a": 1}\nAcme on 2021-01-04: Beats {estimates}'
    with pytest.raises(PromptError, match="forecast_prompt.*sector"):
        render_forecast("{sector}: {text}", row)


def test_render_recall_is_date_only():
    t = "On {target_date}, did {outcome_description} of {entity_name} ({ticker}) move vs {reference_period}?"
    out = render_recall(
        t,
        outcome_description="the close",
        reference_period="the prior day",
        entity_name="Acme",
        ticker="ACM",
        target_date="2021-01-05",
    )
    assert out == "On 2021-01-05, did the close of Acme (ACM) move vs the prior day?"
    with pytest.raises(PromptError, match="text"):
        render_recall(
            "{text} on {target_date}",
            outcome_description="",
            reference_period="",
            entity_name="A",
            ticker=None,
            target_date="2021-01-05",
        )
