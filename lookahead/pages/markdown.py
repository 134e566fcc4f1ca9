"""REPORT.md drawn from the sections (lookahead.pages.sections)."""

from __future__ import annotations

import pandas as pd

from lookahead.pages.blocks import Bullets, Figure, Item, Links, Para, Raw, Section, Table
from lookahead.safe_output import strip_controls


def table(frame: pd.DataFrame) -> str:
    cols = [str(c) for c in frame.columns]
    head = "| " + " | ".join(cols) + " |\n|" + "|".join("---" for _ in cols) + "|\n"
    return head + "".join(
        "| " + " | ".join(str(v).replace("|", "\\|").replace("\n", " ") for v in row) + " |\n"
        for row in frame.itertuples(index=False)
    )


def _item(item: Item) -> str:
    if isinstance(item, Para):
        return item.text + "\n"
    if isinstance(item, Bullets):
        return "".join(f"- {b}\n" for b in item.items)
    if isinstance(item, Table):
        out = table(item.frame)
        if item.caption:
            out = item.caption + "\n\n" + out
        if item.publication and item.csv:
            out += f"\nLaTeX: `{item.csv}`.\n"
        return out
    if isinstance(item, Figure):
        return f"![{item.title}]({item.png})\n" if item.in_markdown and item.png else ""
    if isinstance(item, Raw):
        return item.markdown.strip("\n") + "\n"
    if isinstance(item, Links):
        return "".join(f"- {label}: " + ", ".join(f"[{p}]({p})" for p in paths) + "\n" for label, paths in item.groups if paths)
    raise TypeError(f"no Markdown for {type(item).__name__}")


def render(sections: list[Section]) -> str:
    out = []
    for sec in sections:
        out.append(f"{'#' * sec.level} {sec.title}\n")
        if sec.lead:
            out.append(f"_{sec.lead}_\n")
        out += [s for s in (_item(i) for i in sec.items) if s]
    return strip_controls("\n".join(out))  # no control byte from data reaches the file
