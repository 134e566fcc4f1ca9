"""Values from a study or its data as Markdown that reads them literally.

A report paragraph is Markdown written by this package with values from the study file
(model id, data path, settings) or its data set in it. A value is data, never markup: a
backtick in a model id must not close the code span it is printed in, and `**`, `[`, `<`
in an entity name must not format, link or open a tag. index.html also renders Markdown
with raw HTML switched off (lookahead.pages.html), so whatever a value holds, the page
shows it as text; these helpers keep REPORT.md showing the same characters."""

from __future__ import annotations

import re

#: ASCII punctuation CommonMark lets a backslash escape
_PUNCT = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>&~\"'=:;$%^,?/@])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


def _one_line(value: object) -> str:
    """The value on one line, without control bytes or bidirectional overrides."""
    return _CONTROL.sub("", str(value).replace("\r\n", " ").replace("\n", " ").replace("\r", " "))


def code(value: object) -> str:
    """A code span holding `value` verbatim: fenced with one backtick more than the
    longest run inside it, padded with a space where it starts or ends with a backtick
    (CommonMark strips one space on each side)."""
    text = _one_line(value)
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def literal(value: object) -> str:
    """Plain text: every Markdown punctuation character escaped with a backslash."""
    return _PUNCT.sub(r"\\\1", _one_line(value))
