"""Prompt rendering and the recall-label tokenization check.

The forecast prompt is the user's production prompt, used verbatim: only ``{column}``
placeholders are filled, nothing else in the text changes (the protocol forbids editing
it to raise the parse rate). The recall prompt is the protocol's date-only template,
which must not see the text. Labels are checked on the exact tokenizer before any
recall query is paid for, because a multi-token label silently loses its mass in a
max_tokens=1, top-20 query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from lookahead.config import StudyConfigError

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

RECALL_FIELDS = (
    "outcome_description", "reference_period", "entity_name", "ticker", "target_date",
    "entity_id", "label_up", "label_down", "label_unknown",
)
RECALL_FORBIDDEN = ("text", "text_date", "outcome", "row_id")
RECALL_ENTITY_FIELDS = ("entity_name", "ticker", "entity_id")  # the recall query names one
# Columns a forecast prompt may not use unless the study allows them explicitly (setting
# forecast_prompt_allowed_columns): the realized outcome is the answer itself, and the
# target date tells the model which realized value to recall.
FORECAST_LEAKING = ("outcome", "target_date")


class PromptError(StudyConfigError):
    """A template names a value that does not exist (or must not be used)."""


def placeholders(template: str) -> list[str]:
    return _PLACEHOLDER.findall(template)


def _as_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return str(value)


def fill(template: str, values: Mapping[str, Any], setting: str) -> str:
    """Replace ``{name}`` placeholders; an unknown name raises naming the setting.

    Plain substitution (not str.format), so braces that are not placeholders, such as a
    JSON example in a production prompt, pass through unchanged. An empty ticker drops
    the `` ({ticker})`` around it rather than leaving ``()`` in the prompt."""
    if not _as_text(values.get("ticker")).strip():
        template = template.replace(" ({ticker})", "").replace("({ticker})", "")
    unknown = sorted({n for n in placeholders(template) if n not in values})
    if unknown:
        raise PromptError(
            f"setting '{setting}': placeholder(s) {', '.join('{' + n + '}' for n in unknown)} "
            f"are not available; use one of {', '.join(sorted(values))}"
        )
    return _PLACEHOLDER.sub(lambda m: _as_text(values[m.group(1)]), template)


def render_forecast(template: str, row: Mapping[str, Any]) -> str:
    """The user's forecast prompt filled with one input row (any input column)."""
    return fill(template, row, "forecast_prompt")


def check_recall_template(template: str) -> None:
    """The recall query names the entity and the target date and carries no text column
    (protocol step 2); checked before any query is paid for."""
    names = placeholders(template)
    bad = [n for n in names if n in RECALL_FORBIDDEN]
    if bad:
        raise PromptError(
            f"setting 'recall_template': the recall query may not contain {', '.join('{' + b + '}' for b in bad)} "
            "(protocol step 2: only the entity and the target date)"
        )
    if "target_date" not in names:
        raise PromptError("setting 'recall_template': the recall query must name the date it asks "
                          "about: write {target_date} (protocol step 2)")
    if not any(n in names for n in RECALL_ENTITY_FIELDS):
        raise PromptError("setting 'recall_template': the recall query must name the entity: write "
                          "{entity_name}, {ticker} or {entity_id} (protocol step 2)")


def check_forecast_template(template: str, column_map: Mapping[str, Any],
                            allowed: Sequence[str] | None) -> None:
    """The forecast prompt may not use the outcome or the target date (under its protocol
    name or the user's column name) unless forecast_prompt_allowed_columns lists it: the
    outcome leaks the answer into the forecast, the target date invites recalling it."""
    allowed = list(allowed or [])
    unknown = [a for a in allowed if a not in FORECAST_LEAKING]
    if unknown:
        raise PromptError(f"setting 'forecast_prompt_allowed_columns': {unknown} not one of "
                          f"{', '.join(FORECAST_LEAKING)}")
    names = set(placeholders(template))
    for col in FORECAST_LEAKING:
        if col in allowed:
            continue
        aliases = {col, str(column_map.get(col) or col)}
        used = sorted(names & aliases)
        if used:
            raise PromptError(
                f"setting 'forecast_prompt': {', '.join('{' + u + '}' for u in used)} is the "
                f"{'realized outcome' if col == 'outcome' else 'target date'}; a forecast prompt "
                f"that sees it can leak the answer. Remove it, or list '{col}' under "
                "forecast_prompt_allowed_columns if that is intended")


def render_recall(
    template: str,
    *,
    outcome_description: str,
    reference_period: str,
    entity_name: str,
    ticker: str | None,
    target_date: str,
    entity_id: str = "",
    labels: Mapping[str, str] | None = None,
) -> str:
    """The protocol's date-only recall query for one (entity, target date)."""
    check_recall_template(template)
    labels = labels or {}
    values = {
        "outcome_description": outcome_description,
        "reference_period": reference_period,
        "entity_name": entity_name,
        "ticker": ticker or "",
        "target_date": target_date,
        "entity_id": entity_id,
        "label_up": labels.get("up", "up"),
        "label_down": labels.get("down", "down"),
        "label_unknown": labels.get("unknown", "unknown"),
    }
    return fill(template, values, "recall_template")


# ----------------------------------------------------------------------------- labels


@dataclass
class LabelCheck:
    """Labels to score with (synonyms substituted) and what the check found."""

    labels: dict[str, str]
    emitted_form: str  # "bare" or "leading space": how the model would start its answer
    notes: list[str] = field(default_factory=list)


def _n_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def emitted_form(prompt: str | None) -> str | None:
    """After whitespace (e.g. a chat template's ``assistant\\n``) the answer starts bare;
    after other text it starts with a space. None when no prompt is given."""
    if prompt is None:
        return None
    return "bare" if (prompt == "" or prompt[-1].isspace()) else "leading space"


def is_single_token(tokenizer: Any, label: str, form: str | None) -> bool:
    """Whether ``label`` is one token in the form the model would emit it.

    With form None (prompt unknown) either form being one token is enough."""
    bare = _n_tokens(tokenizer, label) == 1
    spaced = _n_tokens(tokenizer, " " + label) == 1
    if form == "bare":
        return bare
    if form == "leading space":
        return spaced
    return bare or spaced


def check_recall_labels(
    tokenizer: Any,
    labels: Mapping[str, str],
    synonyms: Mapping[str, Sequence[str]] | None = None,
    sample_prompt: str | None = None,
) -> LabelCheck:
    """Verify each recall label is a single token on the exact tokenizer.

    A multi-token label is replaced by the first configured single-token synonym
    (``recall_label_synonyms``); when none works the study stops with an error naming
    the label, its tokens and the setting to change (protocol step 2)."""
    form = emitted_form(sample_prompt)
    synonyms = synonyms or {}
    resolved: dict[str, str] = {}
    notes: list[str] = []
    for role in ("up", "down", "unknown"):
        label = str(labels[role])
        if is_single_token(tokenizer, label, form):
            resolved[role] = label
            continue
        pieces = tokenizer.tokenize((" " if form == "leading space" else "") + label)
        choice = next(
            (str(s) for s in synonyms.get(role, []) or [] if is_single_token(tokenizer, str(s), form)),
            None,
        )
        if choice is None:
            raise PromptError(
                f"setting 'recall_labels.{role}': label '{label}' is {len(pieces)} tokens {pieces} "
                f"on this model's tokenizer (answer form: {form or 'either'}); a max_tokens=1 query "
                f"cannot return it. Add a single-token synonym under 'recall_label_synonyms.{role}' "
                "or choose another label, and make recall_template ask for it."
            )
        notes.append(f"recall label '{label}' ({role}) is multi-token {pieces}; using synonym '{choice}'")
        resolved[role] = choice
    if len({v.strip().lower() for v in resolved.values()}) < 3:
        raise PromptError(f"setting 'recall_labels': labels {resolved} are not distinct")
    return LabelCheck(resolved, form or "either", notes)
