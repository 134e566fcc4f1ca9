"""Scores computed from raw lines: P(label), Min-K% LAP, the forecast label, confidence.

P(label) and Min-K% that reach the regressions are computed by the dbt staging SQL
(models/staging/stg_recall_responses.sql, stg_mink_scores.sql), which stays fast at a
million lines. The Python versions here are their test oracle (checked against the SQL
to 1e-12 on a generated corpus of edge cases, tests/python/test_scoring_oracle.py) and
feed the jobs' console summaries only. The forecast parser below is the opposite: it
is THE implementation, used by the forecast job and by the dbt Python model
int_forecasts alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# ----------------------------------------------------------------------------- recall


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name)


def label_probability(top_logprobs: Iterable[Any], label: str) -> float | None:
    """P(label) by the protocol rule; None when the label is censored (absent).

    Entries without a token or a log-prob are dropped; each token id counts once, the
    first entry with that id (APIs sometimes repeat a token, possibly with another
    log-prob); an entry without an id is identified by its raw token text. P(label) is
    the sum of exp(logprob) over the kept entries whose token, stripped of whitespace
    (str.strip) and lowercased, equals the label; no renormalisation. Absent from the
    top-k means the mass is unknown (censored), which is not the same as zero."""
    want = label.strip().lower()
    seen: set[Any] = set()
    total = 0.0
    found = False
    for item in top_logprobs:
        token = _field(item, "token")
        logprob = _field(item, "logprob")
        if token is None or logprob is None:
            continue
        tid = _field(item, "token_id")
        ident = ("id", tid) if tid is not None else ("text", token)
        if ident in seen:
            continue
        seen.add(ident)
        if token.strip().lower() == want:
            total += _exp(logprob)
            found = True
    return total if found else None


def _exp(x: float) -> float:
    """exp that, like SQL, gives inf on overflow instead of raising."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def sample_frequency(samples: Sequence[str], label: str) -> float:
    """Sampling fallback: share of samples whose stripped, lowercased text equals the label."""
    if not samples:
        raise ValueError("no samples to count")
    want = label.strip().lower()
    return sum(1 for s in samples if s is not None and s.strip().lower() == want) / len(samples)


@dataclass(frozen=True)
class RecallScores:
    """One recall answer. p_* is None when censored; lap/ud treat censored mass as 0.

    lap and ud are therefore lower/approximate values when a label is censored; the
    ``censored`` tuple says which labels, so a summary can count and report them."""

    p_up: float | None
    p_down: float | None
    p_unknown: float | None
    censored: tuple[str, ...]
    approximated: bool

    @property
    def lap(self) -> float:
        return (self.p_up or 0.0) + (self.p_down or 0.0)

    @property
    def ud(self) -> float:
        return (self.p_up or 0.0) - (self.p_down or 0.0)


def recall_scores(record: Mapping[str, Any], labels: Mapping[str, str]) -> RecallScores:
    """P(up), P(down), P(unknown) from a raw recall line (logprobs or samples)."""
    probs: dict[str, float | None] = {}
    samples = record.get("samples")
    exact = {e["role"]: e for e in record.get("label_logprobs") or []}
    for role in ("up", "down", "unknown"):
        if exact:  # exact probabilities (setting recall_probabilities): never censored
            probs[role] = _exp(float(exact[role]["logprob"]))
        elif samples:
            probs[role] = sample_frequency(samples, labels[role])
        else:
            probs[role] = label_probability(record.get("top_logprobs") or [], labels[role])
    censored = tuple(r for r, p in probs.items() if p is None)
    return RecallScores(probs["up"], probs["down"], probs["unknown"], censored, bool(record.get("approximated")))


# ----------------------------------------------------------------------------- Min-K%


def mink_lap(logprobs: Sequence[float | None], k: float = 0.2, mean: str = "geometric") -> float | None:
    """Min-K% LAP over a prompt's token log-probs, first token included (paper eq. 1).

    The first prompt token has no conditional probability and is skipped whatever its
    entry holds; None entries after it are dropped. The lowest max(1, floor(K*n)) of the
    n remaining log-probs are kept; ``geometric`` returns exp(mean of them) (eq. 1),
    ``arithmetic`` the mean of their probabilities (the paper's table notes). None when
    no scored token remains or when one is NaN (a NaN has no place in an ordering)."""
    if not 0 < k <= 1:
        raise ValueError(f"mink_k={k} must be in (0, 1]")
    if mean not in ("geometric", "arithmetic"):
        raise ValueError(f"mink_mean='{mean}' must be geometric or arithmetic")
    vals = [float(x) for x in list(logprobs)[1:] if x is not None]
    if not vals or any(math.isnan(x) for x in vals):
        return None
    vals.sort()
    m = max(1, math.floor(k * len(vals)))
    low = vals[:m]
    if mean == "geometric":
        return _exp(sum(low) / m)
    return sum(_exp(x) for x in low) / m


# The protocol's forecast parse-rate floor (step 1). The forecast job stops below it
# unless the study sets accept_low_parse_rate; gate_panel applies the same floor.
MIN_PARSE_RATE = 0.95


# ----------------------------------------------------------------------------- forecast


def normalize_response(text: str | None) -> str:
    """Lowercase, turn punctuation into spaces, collapse whitespace."""
    if not text:
        return ""
    t = re.sub(r"[^\w%.+-]+", " ", text.lower())
    t = re.sub(r"[.+-](?!\d)", " ", t)  # keep 0.8, +1, -2; drop sentence dots and hyphens
    return " ".join(t.split())


def parse_forecast(response: str | None, labels: Mapping[str, float]) -> tuple[str | None, float | None]:
    """(label, value) from a response with the user's label mapping, else (None, None).

    Labels are matched as whole words on the normalised response. When the response
    starts with a label, the longest such label wins ("significantly increase" over
    "significantly"). Otherwise the longest labels found anywhere are taken, dropping
    labels that only occur inside a longer match ("increase" inside "significantly
    increase"); if labels with different values remain, the answer is ambiguous and
    unparsed (the parser never guesses)."""
    norm = normalize_response(response)
    if not norm:
        return None, None
    padded = f" {norm} "
    table = {normalize_response(str(k)): (str(k), float(v)) for k, v in labels.items()}
    by_len = sorted(table, key=len, reverse=True)
    for lab in by_len:
        if lab and padded.startswith(f" {lab} "):
            return table[lab]
    spans: list[tuple[int, int, str]] = []
    for lab in by_len:
        if not lab:
            continue
        for m in re.finditer(rf"(?<= ){re.escape(lab)}(?= )", padded):
            s, e = m.start(), m.end()
            if any(s >= s2 and e <= e2 for s2, e2, _ in spans):
                continue  # inside a longer label already matched
            spans.append((s, e, lab))
    values = {table[lab][1] for _, _, lab in spans}
    if len(values) != 1:
        return None, None
    first = min(spans)[2]
    return table[first]


def prompt_asks_confidence(prompt: str) -> bool:
    """Whether the forecast prompt asks for a stated confidence."""
    return bool(re.search(r"confiden|probabilit|how (sure|certain)", prompt, re.IGNORECASE))


_CONF = re.compile(
    r"(?:confiden\w*|probabilit\w*|certain\w*)\D{0,24}?(\d+(?:\.\d+)?)\s*(%|percent)?",
    re.IGNORECASE,
)
_PCT = re.compile(r"(\d+(?:\.\d+)?)\s*(%|percent)", re.IGNORECASE)


def parse_stated_confidence(response: str | None) -> float | None:
    """Confidence in [0, 1] stated in a response ("Confidence: 80%", "confidence 0.8").

    A number after a confidence word is read first, else a lone percentage. Values
    above 1 are percentages; anything outside [0, 100] is not a confidence (None)."""
    if not response:
        return None
    m = _CONF.search(response) or _PCT.search(response)
    if not m:
        return None
    value = float(m.group(1))
    if m.group(2) or value > 1:
        value /= 100.0
    return value if 0.0 <= value <= 1.0 else None


def first_token_prob(top_logprobs: Sequence[Any]) -> float | None:
    """Probability of the first generated token: the greedy (top-1) entry at position 1."""
    vals = [_field(t, "logprob") for t in top_logprobs if _field(t, "logprob") is not None]
    return math.exp(max(vals)) if vals else None
