"""Parsing an agent's answer into prediction and rationale (rationale job and TimeSPEC)."""

from __future__ import annotations

import re
from typing import Sequence


def parse_rationale(text: str, labels: Sequence[str]) -> tuple[str | None, str]:
    """(prediction label or None, rationale text) from a 'Rationale: ... Prediction: x' answer.

    The prediction is the first label word after the last 'Prediction:'; without that
    marker, the last label word of the answer. The rationale is the text before the
    marker, without a leading 'Rationale:'."""
    text = text or ""
    words = "|".join(re.escape(x) for x in labels)
    marker = list(re.finditer(r"prediction\s*:", text, re.IGNORECASE))
    if marker:
        head, tail = text[: marker[-1].start()], text[marker[-1].end():]
        m = re.search(rf"\b({words})\b", tail, re.IGNORECASE)
        pred = m.group(1).lower() if m else None
    else:
        head = text
        found = re.findall(rf"\b({words})\b", text, re.IGNORECASE)
        pred = found[-1].lower() if found else None
    head = re.sub(r"^\s*rationale\s*:\s*", "", head, flags=re.IGNORECASE).strip()
    return pred, head
