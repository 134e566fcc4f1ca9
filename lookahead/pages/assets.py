"""Files the renderings link to, written from the sections: each figure's PNG (rendered
by vl-convert from the chart's Vega-Lite spec, the spec index.html embeds) and each
publication table's LaTeX (great_tables). Written via a temp name and renamed."""

from __future__ import annotations

import os
from pathlib import Path

import vl_convert as vlc
from great_tables import GT

from lookahead.pages.blocks import Figure, Section, Table
from lookahead.safe_output import safe_frame, strip_controls

PNG_SCALE = 1.5


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def gt_table(item: Table) -> GT:
    """The publication-style table of a block (one place for HTML and LaTeX)."""
    # text from the data: no control byte, no line break (a blank line ends a LaTeX table's cell)
    frame = safe_frame(item.frame, formulas=False).replace(r"\s*[\r\n]+\s*", " ", regex=True)
    g = GT(frame, id=item.name.replace("_", "-"))
    if item.caption:
        g = g.tab_header(title=strip_controls(item.caption).replace("\n", " "))
    return g


def write(sections: list[Section], results_dir: Path) -> list[Path]:
    out = []
    for sec in sections:
        for item in sec.items:
            if isinstance(item, Figure) and item.in_markdown and item.png:
                out.append(_write(results_dir / item.png, vlc.vegalite_to_png(item.spec, scale=PNG_SCALE)))
            elif isinstance(item, Table) and item.publication and item.csv.endswith(".tex"):
                out.append(_write(results_dir / item.csv, gt_table(item).as_latex().encode("utf-8")))
    return out
