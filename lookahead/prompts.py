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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from lookahead.config import StudyConfigError
from lookahead.rows import PY_WHITESPACE

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

RECALL_FIELDS = (
    "outcome_description",
    "reference_period",
    "entity_name",
    "ticker",
    "target_date",
    "entity_id",
    "label_up",
    "label_down",
    "label_unknown",
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
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return ""
    return str(value)


def text_column(values: Any) -> pa.Array | pa.Scalar:
    """A value column as the text a prompt shows: ``str(value)``, None/NaN as empty text.

    Arrow or pandas string columns keep their strings (nulls -> ""), without a Python
    object per value; any other column (numbers, booleans, dates) is converted value by
    value with ``str``, exactly as a single value is. A plain string is one value for
    every row (a study setting such as outcome_description)."""
    if isinstance(values, str):
        return pa.scalar(values, pa.string())
    if isinstance(values, pd.Series) and pd.api.types.is_string_dtype(values.dtype):
        try:
            values = pa.array(values, from_pandas=True)  # None/NaN -> null
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types: value by value
            values = values.tolist()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            return pc.fill_null(values.cast(pa.string()), "")
        values = values.to_pylist()
    elif isinstance(values, pd.Series):
        values = values.tolist()
    return pa.array([_as_text(v) for v in values], pa.string())


@dataclass(frozen=True)
class Template:
    """A template split once into literal parts and placeholder names.

    The one rule of prompt filling: plain substitution (not str.format), so braces that
    are not placeholders, such as a JSON example in a production prompt, pass through
    unchanged; a value is its text (`text_column`: None, NaN -> empty text); an empty
    (or all-whitespace) ticker drops the `` ({ticker})`` around it rather than leaving
    ``()`` in the prompt. Prompts are rendered column-wise (`render_columns`: Arrow joins
    the literal parts and the value columns), because a build renders every row of a
    large study; one prompt (`render`) is the same function on one-row columns."""

    parts: tuple[str, ...]  # literal text around the placeholders (len(names) + 1)
    names: tuple[str, ...]  # placeholder names in order
    no_ticker: Template | None  # the template with ``({ticker})`` dropped, if it differs

    @staticmethod
    def parse(template: str, available: Iterable[str], setting: str) -> Template:
        """Split `template`; a placeholder not in `available` raises naming the setting."""
        return _parse(template, frozenset(available), setting)

    def columns(self) -> list[str]:
        """The value columns `render_columns` reads."""
        return sorted(set(self.names))

    def render(self, values: Mapping[str, Any]) -> str:
        """One prompt from one row (or query) of values."""
        return self.render_columns({name: [values[name]] for name in self.columns()}, 1)[0].as_py()

    def render_columns(self, columns: Mapping[str, Any], n: int) -> pa.Array:
        """n prompts (Arrow strings) from value columns: per placeholder name a column of
        n values (Arrow, pandas or a list; `text_column`) or one string for every row."""
        texts = {name: text_column(columns[name]) for name in self.columns()}
        prompts = self._join(texts, n)
        if self.no_ticker is None:
            return prompts
        blank = pc.equal(pc.utf8_trim(texts["ticker"], characters=PY_WHITESPACE), "")
        if isinstance(blank, pa.Scalar):  # one ticker for every row
            return self.no_ticker._join(texts, n) if blank.as_py() else prompts
        n_blank = pc.sum(blank).as_py() or 0
        if not n_blank:
            return prompts
        blank_texts = {k: v.filter(blank) if isinstance(v, pa.Array) else v for k, v in texts.items()}
        return pc.replace_with_mask(prompts, blank, self.no_ticker._join(blank_texts, n_blank))

    def _join(self, texts: Mapping[str, pa.Array | pa.Scalar], n: int) -> pa.Array:
        args: list[Any] = [self.parts[0]]
        for name, part in zip(self.names, self.parts[1:], strict=False):
            args += (texts[name], part)
        if not any(isinstance(texts[name], pa.Array) for name in self.names):  # no column varies
            text = "".join(a if isinstance(a, str) else a.as_py() for a in args)
            return pa.repeat(pa.scalar(text, pa.string()), n)
        return pc.binary_join_element_wise(*args, "")


@lru_cache(maxsize=64)
def _parse(template: str, available: frozenset[str], setting: str, with_ticker: bool = True) -> Template:
    """An empty ticker drops ``({ticker})``: that variant is parsed too, and a study
    without a ticker column renders every prompt from it."""
    dropped = template.replace(" ({ticker})", "").replace("({ticker})", "")
    if not with_ticker or "ticker" not in available:
        template = dropped
    names = tuple(placeholders(template))
    unknown = sorted({n for n in names if n not in available})
    if unknown:
        raise PromptError(
            f"setting '{setting}': placeholder(s) {', '.join('{' + n + '}' for n in unknown)} "
            f"are not available; use one of {', '.join(sorted(available))}"
        )
    no_ticker = _parse(dropped, available, setting, False) if dropped != template else None
    return Template(tuple(_PLACEHOLDER.split(template)[::2]), names, no_ticker)


def fill(template: str, values: Mapping[str, Any], setting: str) -> str:
    """Replace ``{name}`` placeholders (the rule: `Template`); an unknown name raises
    naming the setting."""
    return Template.parse(template, values.keys(), setting).render(values)


def render_forecast(template: str, row: Mapping[str, Any]) -> str:
    """The user's forecast prompt filled with one input row (any input column)."""
    return fill(template, row, "forecast_prompt")


@lru_cache(maxsize=16)
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
        raise PromptError(
            "setting 'recall_template': the recall query must name the date it asks about: write {target_date} (protocol step 2)"
        )
    if not any(n in names for n in RECALL_ENTITY_FIELDS):
        raise PromptError(
            "setting 'recall_template': the recall query must name the entity: write "
            "{entity_name}, {ticker} or {entity_id} (protocol step 2)"
        )


def check_forecast_template(template: str, column_map: Mapping[str, Any], allowed: Sequence[str] | None) -> None:
    """The forecast prompt may not use the outcome or the target date (under its protocol
    name or the user's column name) unless forecast_prompt_allowed_columns lists it: the
    outcome leaks the answer into the forecast, the target date invites recalling it."""
    allowed = list(allowed or [])
    unknown = [a for a in allowed if a not in FORECAST_LEAKING]
    if unknown:
        raise PromptError(f"setting 'forecast_prompt_allowed_columns': {unknown} not one of {', '.join(FORECAST_LEAKING)}")
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
                "forecast_prompt_allowed_columns if that is intended"
            )


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
    return recall_prompt_columns(
        template,
        outcome_description=outcome_description,
        reference_period=reference_period,
        entity_names=[entity_name],
        tickers=[ticker],
        target_dates=[target_date],
        entity_ids=[entity_id],
        labels=labels,
    )[0].as_py()


def recall_prompt_columns(
    template: str,
    *,
    outcome_description: str,
    reference_period: str,
    entity_names: Any,
    tickers: Any,
    target_dates: Any,
    entity_ids: Any,
    labels: Mapping[str, str] | None = None,
) -> pa.Array:
    """The recall queries of many (entity, target date) pairs as Arrow strings, from value
    columns (Arrow, pandas or lists); the study's text and labels are the same in each."""
    check_recall_template(template)
    labels = labels or {}
    columns: dict[str, Any] = {
        "outcome_description": _as_text(outcome_description),
        "reference_period": _as_text(reference_period),
        "entity_name": entity_names,
        "ticker": tickers,
        "target_date": target_dates,
        "entity_id": entity_ids,
        "label_up": _as_text(labels.get("up", "up")),
        "label_down": _as_text(labels.get("down", "down")),
        "label_unknown": _as_text(labels.get("unknown", "unknown")),
    }
    return Template.parse(template, columns, "recall_template").render_columns(columns, len(entity_names))


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
