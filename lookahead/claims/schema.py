"""The extracted-claim schema (seed 002, Appendix D.3) and its validation.

Why a JSON Schema: the same document is handed to backends that can constrain their
output (vLLM guided decoding, OpenAI ``response_format``) and used to validate every
stored extraction, so what a constrained backend produces and what a free-text backend
must produce are one definition.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

from lookahead.errors import LookaheadError

# Categories of Table 1 and their leakage rule (Eq. 3). "search" means the claim is
# dated against the corpus (tau(c) = earliest supporting document).
CATEGORY_RULE: dict[str, str] = {
    "A1": "search",  # discrete event
    "A2": "search",  # state / measurement at a time
    "A3": "search",  # content of a dated publication
    "A4": "leaked",  # outcome of the target event: always leaked
    "A5": "leaked",  # consequence of the target event: always leaked
    "B1": "not_leaked",  # background knowledge: never leaked
    "B2": "not_leaked",  # definitional / logical: never leaked
}
CATEGORIES: tuple[str, ...] = tuple(CATEGORY_RULE)
CATEGORY_NAMES: dict[str, str] = {
    "A1": "Discrete Event",
    "A2": "State/Measurement",
    "A3": "Publication",
    "A4": "Outcome",
    "A5": "Consequential",
    "B1": "Background",
    "B2": "Definitional",
}

CLAIM_FIELDS = ("claim_id", "claim_text", "original_text", "temporal_reference", "claim_category", "category_reasoning")

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "claim_id": {"type": ["integer", "string"]},
                    "claim_text": {"type": "string", "minLength": 1},
                    "original_text": {"type": "string"},
                    "temporal_reference": {"type": ["string", "null"]},
                    "claim_category": {"type": "string", "enum": list(CATEGORIES)},
                    "category_reasoning": {"type": "string"},
                },
                "required": list(CLAIM_FIELDS),
                "additionalProperties": False,
            },
        }
    },
    "required": ["claims"],
    "additionalProperties": False,
}

_VALIDATOR = jsonschema.Draft202012Validator(EXTRACTION_SCHEMA)


@dataclass(frozen=True)
class Claim:
    """One atomic claim as extracted; ``claim_id`` is its 1-based position."""

    claim_id: int
    claim_text: str
    original_text: str
    temporal_reference: str | None
    category: str
    category_reasoning: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "claim_text": self.claim_text,
            "original_text": self.original_text,
            "temporal_reference": self.temporal_reference,
            "claim_category": self.category,
            "category_reasoning": self.category_reasoning,
        }


class ExtractionError(LookaheadError, ValueError):
    """An extraction that does not validate; the message says where."""


def schema_errors(obj: Any) -> list[str]:
    """Every schema violation of ``obj`` as 'path: message' (empty when valid)."""
    out = []
    for err in sorted(_VALIDATOR.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = "/".join(str(p) for p in err.absolute_path) or "(root)"
        out.append(f"{path}: {err.message}")
    return out


def claims_from_object(obj: Any) -> list[Claim]:
    """Validated claims of one extraction object; claim ids renumbered 1..n in order
    (models number inconsistently, and the Shapley coalitions index by position)."""
    errors = schema_errors(obj)
    if errors:
        raise ExtractionError("; ".join(errors[:3]) + (f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""))
    claims = []
    for i, c in enumerate(obj["claims"], 1):
        ref = c["temporal_reference"]
        claims.append(
            Claim(
                i,
                c["claim_text"].strip(),
                c["original_text"],
                ref.strip() if isinstance(ref, str) and ref.strip() else None,
                c["claim_category"],
                c["category_reasoning"],
            )
        )
    return claims


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_extraction_text(text: str | None) -> list[Claim]:
    """Claims from a model's raw answer: the JSON object (possibly inside a code fence or
    surrounded by prose), validated against EXTRACTION_SCHEMA."""
    if text is None or not text.strip():
        raise ExtractionError("empty answer")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    last_error = "no JSON object found"
    for cand in candidates:
        start, end = cand.find("{"), cand.rfind("}")
        if start < 0 or end <= start:
            continue
        try:
            obj = json.loads(cand[start : end + 1])
        except ValueError as exc:
            last_error = f"not valid JSON ({exc})"
            continue
        return claims_from_object(obj)
    raise ExtractionError(last_error)
