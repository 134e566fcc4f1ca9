"""Parsing an agent's answer into prediction and rationale (rationale job and TimeSPEC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lookahead.claims.inputs import ClaimsResolved


def parse_rationale(text: str, labels: Sequence[str]) -> tuple[str | None, str]:
    """(prediction label or None, rationale text) of a classification answer
    'Rationale: ... Prediction: x' (lookahead.claims.tasks.Classification.agent_prediction)."""
    from lookahead.claims.tasks import KINDS, ClaimsDerived
    from lookahead.settings_sections import ClaimsSettings

    pred, rationale, _ = KINDS["classification"].agent_prediction(
        text, ClaimsDerived(ClaimsSettings.with_defaults(claims_labels=list(labels), claims_task_kind="classification"))
    )
    return pred, rationale


def parse_agent_answer(text: str, st: ClaimsResolved) -> tuple[str | None, str, str | None]:
    """(canonical prediction or None, rationale, error or None) of an agent's answer for
    the study's task kind (its ``agent_prediction``). The answer must then fit the
    seed's submit_prediction schema (Appendix D.1): a prediction, and a rationale of at
    least ``claims_rationale_min_chars`` characters (default the schema's 400, 1,000 for
    rankings). A failing answer is kept with its error, never guessed."""
    pred, rationale, err = st.kind.agent_prediction(text, st)
    need = st.rationale_min_chars
    if pred is not None and len(rationale) < need:
        pred, err = None, f"rationale has {len(rationale)} characters; the task's schema asks for at least {need}"
    return pred, rationale, err
