"""The structured blocks a report section is made of; each renderer draws every kind.

A block holds display-ready values (strings formatted by lookahead.stats.verdict's
printers), never raw floats, so REPORT.md and index.html print the same digits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Para:
    """A paragraph of Markdown inline text (bold, code spans)."""

    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    """A table of display strings. `name` is its id in the page; `csv` the file (relative
    to the results folder) holding every row when the report shows only some of them;
    `publication` asks the HTML renderer for a publication-style (great_tables) table."""

    frame: pd.DataFrame
    name: str
    caption: str = ""
    csv: str = ""
    publication: bool = False


@dataclass(frozen=True)
class Figure:
    """A Vega-Lite chart: REPORT.md shows its PNG (`png`, relative to the results folder,
    rendered from the same spec by vl-convert); index.html embeds the spec interactively.
    `in_markdown` False: an interactive view only (the claim browser). `list_view`: a long
    list with filters (the claim browser): the page shows the filters above the rows and
    the rows in a box of their own height, so the filters are on the screen the list
    starts on and the rest of the page does not move down by the list's length."""

    name: str
    title: str
    spec: dict[str, Any]
    png: str = ""
    in_markdown: bool = True
    list_view: bool = False


@dataclass(frozen=True)
class Raw:
    """A section's body written as Markdown (the cutoff and paper sections); the HTML
    renderer converts it with markdown-it."""

    markdown: str


@dataclass(frozen=True)
class Links:
    """Files of the results folder, relative paths, grouped by a label."""

    groups: tuple[tuple[str, tuple[str, ...]], ...]


Item = Para | Bullets | Table | Figure | Raw | Links


@dataclass
class Section:
    """One report section: a title, one line saying what it shows, and its items.
    `level` 1 is the page head (title and verdict), 2 a section."""

    key: str
    title: str
    lead: str
    items: list[Item] = field(default_factory=list)
    level: int = 2
