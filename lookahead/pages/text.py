"""Values from a study or its data as Markdown that reads them literally.

A report paragraph is Markdown written by this package with values from the study file
(model id, data path, settings) set in it. A value is data, never markup: a backtick in a
model id must not close the code span it is printed in, or the rest of the value would be
read as Markdown (and, before raw HTML was switched off in index.html, as HTML: a
`<script>` in a model id ran in the page). `code` keeps REPORT.md and index.html showing
the value's characters in one span."""

from __future__ import annotations

import re

from lookahead.safe_output import strip_controls


def _one_line(value: object) -> str:
    """The value on one line (tabs and line breaks as spaces), without control bytes or
    bidirectional overrides."""
    return re.sub(r"[\t\r\n]+", " ", strip_controls(str(value)))


def code(value: object) -> str:
    """A code span holding `value` verbatim: fenced with one backtick more than the
    longest run inside it, padded with a space where it starts or ends with a backtick
    (CommonMark strips one space on each side)."""
    text = _one_line(value)
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"
