"""Output files that are safe to open: no spreadsheet formula and no control byte from data.

The report's CSVs quote the study's data (rejected rows' raw values, entity names, claim
texts, outcome wording), and researchers open them in a spreadsheet. A cell such as
``=HYPERLINK("http://evil.example","x")``, ``@SUM(1+1)`` or ``-2+3+cmd|' /C calc'!A0``
is run as a formula there; a NUL or an ANSI escape (``ESC[31m``) in a cell, a Stata
panel or a LaTeX table corrupts the file or rewrites the terminal that prints it.

The rules (docs/SECURITY.md, "Outputs safe to open"), applied when a file is written:

- **Control bytes** are removed from every text value in every output format (CSV,
  Stata .dta, LaTeX, REPORT.md, index.html): C0 controls other than tab, line feed and
  carriage return, DEL, the C1 controls (U+0080-U+009F) and the bidirectional overrides
  and isolates (U+202A-U+202E, U+2066-U+2069), which reorder what a reader sees.
- **Formula cells** in CSVs: a text cell whose first character is ``=``, ``+``, ``-``,
  ``@``, a tab or a carriage return gets a single quote in front (OWASP's CSV-injection
  rule, what spreadsheet-safe exporters do), so a spreadsheet shows it as text. A cell
  that is a number written as text (``-2.5``, ``+3``, ``-1e-05``, ``-inf``) is left as it
  is: numbers stay numbers. Number columns are written as numbers and never change.
  A carriage return inside a text cell becomes a line feed: the CSV writer quotes a cell
  holding a line feed, but a bare carriage return would end the row for a spreadsheet.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

#: characters removed from every text value written to an output file
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: a CSV cell starting with one of these is read as a formula by a spreadsheet
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: the cells a CSV must change, by an ASCII-only test: a formula's first character, a carriage
#: return anywhere (made a line feed), or an ASCII control byte; without formulas, the last
_ASCII_NEEDS = r"^[=+\-@\t\r]|[\x00-\x08\x0b-\x1f\x7f]"
_ASCII_CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:[.,]\d*)?|[.,]\d+)(?:[eE][+-]?\d+)?$|^[+-]?(?:inf|infinity|nan)$", re.IGNORECASE)


def strip_controls(text: str) -> str:
    """``text`` without control bytes and bidirectional overrides (tab and newlines kept)."""
    return CONTROL.sub("", text)


def spreadsheet_cell(value: Any) -> Any:
    """A CSV cell safe to open in a spreadsheet: control bytes removed, and a quote in
    front of text that a spreadsheet would run as a formula. Non-text values (numbers,
    dates, missing values) are returned as they are."""
    if not isinstance(value, str):
        return value
    text = strip_controls(value)
    if text.startswith(FORMULA_START) and not _NUMBER.match(text.strip()):
        text = "'" + text
    # the CSV writer quotes a cell holding a line feed but not one holding a bare carriage
    # return, which a spreadsheet reads as the end of the row
    return text.replace("\r\n", "\n").replace("\r", "\n")


def safe_frame(df: pd.DataFrame, formulas: bool = True) -> pd.DataFrame:
    """A copy of ``df`` whose text cells (and column names) are safe to write: control
    bytes removed everywhere, formula cells quoted when ``formulas`` (CSV). Only columns
    holding text are touched, and in them only the cells that need it (found with
    pandas' vectorised string methods: a report's rejected rows can be millions), so
    number, date and boolean columns are written as they are."""
    fix = spreadsheet_cell if formulas else (lambda v: strip_controls(v) if isinstance(v, str) else v)
    out = df.copy()
    for col in out.columns:
        values = out[col]
        if not (values.dtype == object or pd.api.types.is_string_dtype(values.dtype)):
            continue
        probe = values  # an object column of strings alone is tested as Arrow strings (vectorised)
        if values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) == "string":
            probe = values.astype("str")
        text = probe.str  # non-text cells of a mixed object column read as missing here
        # an ASCII character class first (a Unicode one is several times slower), then the
        # non-ASCII cells alone for C1 controls and bidirectional overrides
        needs = text.contains(_ASCII_NEEDS if formulas else _ASCII_CONTROL, regex=True, na=False)
        wide = ~text.isascii().fillna(True).astype(bool)
        if wide.any():
            hit = values[wide].map(lambda v: isinstance(v, str) and bool(CONTROL.search(v)))
            needs = needs | hit.reindex(values.index, fill_value=False).astype(bool)
        if needs.any():
            out[col] = values.where(~needs, values[needs].map(fix))
    out.columns = [fix(c) if isinstance(c, str) else c for c in out.columns]
    return out


def write_csv(df: pd.DataFrame, path: Any, **kwargs: Any) -> None:
    """``df.to_csv(path, index=False)`` with every text cell made safe (safe_frame)."""
    safe_frame(df).to_csv(path, index=False, **kwargs)
