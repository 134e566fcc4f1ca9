"""The raw tasks the jobs ask (forecast, recall, mink, reference) and what makes a line a
complete answer to each: one registry entry a task (:data:`ANSWER_RULES`), whose keys are
the tasks (:data:`TASKS`).

Why here, apart from the cache that enforces them (lookahead.cache.store, RawStore.append)
and the keys that name the queries (lookahead.keys): a task's answer rule is part of what
the task is, and a new task is added in one place, its rule beside its name. The claim-level
tasks are lookahead.claims.tasks; their lines have no answer rule here (every line counts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from lookahead.measures import REFERENCE_TASK, VOCAB_MOMENTS, ZLIB_BYTES

#: How far above 0 a log-prob may be and still be read as 0 (a log-probability is never
#: positive; a server that rounds a near-certain token may send +1e-7). Above it, the
#: answer is no answer: the backend asks again with the reason, the cache refuses it, and
#: after the retry bound the query is recorded as a failure (a +2.5 would give P > 1).
LOGPROB_TOLERANCE = 1e-4


def _finite_logprob(entry: Any) -> bool:
    value = entry.get("logprob") if isinstance(entry, Mapping) else None
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value <= LOGPROB_TOLERANCE


def positive_logprob_reason(value: float) -> str:
    """The reason a log-prob above LOGPROB_TOLERANCE is not an answer (one wording)."""
    return f"log-prob {value:+g} is positive (above the tolerance {LOGPROB_TOLERANCE:g}; a log-probability is <= 0)"


def clamp_near_zero(record: dict[str, Any]) -> int:
    """Set every log-prob in (0, LOGPROB_TOLERANCE] to 0 in place (top and prompt
    log-probs) and return how many; the count is kept in the line as
    ``clamped_logprobs`` (absent when none), so the study can say how many it read as 0."""
    n = 0
    for field in ("top_logprobs", "prompt_logprobs"):
        for entry in record.get(field) or ():
            value = entry.get("logprob") if isinstance(entry, dict) else None
            if isinstance(value, float) and 0 < value <= LOGPROB_TOLERANCE:
                entry["logprob"] = 0.0
                n += 1
    if n:
        record["clamped_logprobs"] = n
    return n


def _line_extras_problem(record: Mapping[str, Any], extras: Sequence[str]) -> str | None:
    """What a Min-K% line lacks of the extras its key asked for (a line written when the
    extras joined the key: its params name them, lookahead.keys KEY_FREE_PARAMS)."""
    for name in extras:
        bit_check = LINE_EXTRA_BITS.get(name)
        if bit_check is not None and not bit_check[1](record):
            return EXTRA_LACKS[name]
    return None


def _has_zlib_bytes(record: Mapping[str, Any]) -> bool:
    value = record.get("zlib_bytes")
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _has_vocab_moments(record: Mapping[str, Any]) -> bool:
    tokens = record.get("prompt_logprobs") or []
    if len(tokens) < 2:
        return False
    for t in tokens[1:]:
        mu, var = (t.get("vocab_mean"), t.get("vocab_var")) if isinstance(t, Mapping) else (None, None)
        if not (
            isinstance(mu, (int, float))
            and isinstance(var, (int, float))
            and math.isfinite(mu)
            and math.isfinite(var)
            and var >= 0
        ):
            return False
    return True


#: What a prompt-scoring line may carry beside its log-probs (lookahead.measures
#: LINE_EXTRAS, a measure's `needs`), each with its bit in the line's extras mask and the
#: test that a line holds it. Why a mask and not part of the key: the key stands for the
#: forward pass (task, model, prompt, decoding parameters), and the same pass serves a study that needs
#: all of these and one that needs none; the mask says which studies a line serves.
LINE_EXTRA_BITS: dict[str, tuple[int, Callable[[Mapping[str, Any]], bool]]] = {
    ZLIB_BYTES: (1, _has_zlib_bytes),
    VOCAB_MOMENTS: (2, _has_vocab_moments),
}
EXTRA_LACKS = {ZLIB_BYTES: "no zlib_bytes", VOCAB_MOMENTS: "a prompt token after the first has no finite vocabulary moments"}
#: The tasks whose lines carry extras (a prompt scored token by token).
PROMPT_TASKS = ("mink", REFERENCE_TASK)


def extras_bits(record: Mapping[str, Any]) -> int:
    """The extras a line carries (:data:`LINE_EXTRA_BITS`) as a bit mask; 0 for a task that
    carries none."""
    if record.get("task") not in PROMPT_TASKS:
        return 0
    return sum(bit for bit, holds in LINE_EXTRA_BITS.values() if holds(record))


def needs_bits(extras: Iterable[str]) -> int:
    """The bit mask of the named extras (one clear error for a name not in LINE_EXTRA_BITS)."""
    out = 0
    for name in extras:
        if name not in LINE_EXTRA_BITS:
            raise ValueError(f"unknown line extra {name!r}; one of {', '.join(LINE_EXTRA_BITS)}")
        out |= LINE_EXTRA_BITS[name][0]
    return out


def extras_rank(bits: int) -> int:
    """How many extras a mask holds: among a key's lines the richest wins (same pass)."""
    return bin(bits).count("1")


def _forecast_problem(record: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """forecast: response text, and top log-probs at the first position when they were
    asked for (params.top_logprobs > 0)."""
    if not isinstance(record.get("response_text"), str):
        return "no response text"
    if (params.get("top_logprobs") or 0) > 0 and not record.get("top_logprobs"):
        return "no top log-probs at the first position"
    return None


def _recall_problem(record: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """recall: top log-probs (or, in the sampling fallback, all n_samples answers)."""
    n = params.get("n_samples")
    if n:
        samples = record.get("samples") or []
        if len(samples) != int(n) or not all(isinstance(x, str) for x in samples):
            return f"{len(samples)} of {n} samples"
        return None
    if not record.get("top_logprobs"):
        return "no top log-probs"
    return None


def _prompt_scores_problem(record: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """mink (and reference, the same prompt scored by the reference model: its line is a
    Min-K% line): a finite log-prob for every prompt token after the first, and the extras
    its key asked for when the line was written under such a key."""
    lps = record.get("prompt_logprobs") or []
    if not lps:
        return "no prompt log-probs"
    if not all(_finite_logprob(t) for t in lps[1:]):
        return "a prompt token after the first has no finite log-prob at or below 0"
    return _line_extras_problem(record, params.get("line_extras") or ())


#: The task registry: each raw task, in the order the jobs run them, with its answer rule
#: (why a line of the task is not a complete answer, None when it is).
ANSWER_RULES: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]] = {
    "forecast": _forecast_problem,
    "recall": _recall_problem,
    "mink": _prompt_scores_problem,
    REFERENCE_TASK: _prompt_scores_problem,
}
TASKS = tuple(ANSWER_RULES)


def incomplete_reason(record: Mapping[str, Any]) -> str | None:
    """Why ``record`` is not a complete answer for its task, or None when it is.

    The rule the cache enforces, so that a half answer is never read later as a real
    one (an empty top-k would read as a censored recall, LAP 0): every log-prob present
    must be finite and at most LOGPROB_TOLERANCE, then the task's own rule
    (:data:`ANSWER_RULES`) applies; a task without one (a claim-level line) is complete."""
    top = record.get("top_logprobs")
    if top and not all(_finite_logprob(t) for t in top):
        worst = max(
            (
                float(t["logprob"])
                for t in top
                if isinstance(t, Mapping) and isinstance(t.get("logprob"), float) and math.isfinite(t["logprob"])
            ),
            default=None,
        )
        if worst is not None and worst > LOGPROB_TOLERANCE:
            return positive_logprob_reason(worst)
        return "a top log-prob is missing or not finite"
    task = record.get("task")
    rule = ANSWER_RULES.get(task) if isinstance(task, str) else None
    return None if rule is None else rule(record, record.get("params") or {})
