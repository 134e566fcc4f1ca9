"""index.html drawn from the same sections as REPORT.md: one offline file.

Charts are Vega-Lite specs embedded with vega-embed; the Vega, Vega-Lite and vega-embed
JavaScript comes from vl-convert-python's bundle, inlined in the page, so the page makes
no network request (no CDN, no external script, font or stylesheet). Publication tables
are great_tables HTML; Markdown text (bold, code spans, a Markdown-written section) goes
through markdown-it. Links point at the CSV and .tex files beside the page.

Nothing from a study or its data runs in the page: Markdown is rendered with raw HTML off
(a `<script>` in a model id or an entity name is shown as text) and without images (the
page loads nothing), chart specs are JSON with every `<`, `>` and `&` escaped, and a
Content-Security-Policy lets only the inlined bundle run (its SHA-256 hash; no eval, the
charts' expressions go through Vega's interpreter). Styles stay inline-allowed: vega-embed
and great_tables insert their own."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import json
import re
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import vl_convert as vlc
from markdown_it import MarkdownIt

from lookahead.cache.atomic import atomic_write_text
from lookahead.config import PROJECT_ROOT
from lookahead.pages.assets import gt_table
from lookahead.pages.blocks import Bullets, Figure, Item, Links, Para, Raw, Section, Table
from lookahead.safe_output import strip_controls

#: Runs once the bundle has loaded: embeds every chart spec found in the page.
EMBED = """
for (const el of document.querySelectorAll('script[type="application/json"][data-chart]')) {
  const target = document.getElementById(el.dataset.chart);
  vegaEmbed(target, JSON.parse(el.textContent), {actions: false, renderer: "svg", ast: true})
    .then(() => target.setAttribute("data-rendered", "true"))
    .catch((err) => console.error("chart " + el.dataset.chart + ": " + err));
}
"""
CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif;margin:0;color:#1d2430;
 line-height:1.45;background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:12px 28px 60px;background:#fff}
nav{position:sticky;top:0;background:#1d2430;color:#fff;padding:6px 28px;font-size:13px;z-index:5;
 display:flex;flex-wrap:wrap;row-gap:2px}
nav a{color:#cfe3ff;margin-right:14px;text-decoration:none;white-space:nowrap}
h1{font-size:24px;margin:10px 0 6px}h2{font-size:19px;border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:28px}
.lead{color:#555;font-style:italic;margin:2px 0 10px}
.verdict{font-size:16px;background:#f3f6fb;border-left:5px solid #2e86c1;padding:8px 12px;margin:8px 0}
table.plain{border-collapse:collapse;font-size:13px;margin:8px 0}
table.plain th,table.plain td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
table.plain th{background:#f0f2f5}
table.checklist td:last-child{font-weight:600}
.caption{font-size:13px;color:#444;margin:8px 0 2px}
.chart{margin:10px 0;overflow-x:auto}
section{overflow-x:auto}
.figures{display:flex;flex-wrap:wrap;gap:14px}
figure.list{max-height:620px;overflow:auto;border:1px solid #ddd;padding:0 6px}
figure.list .vega-embed{display:flex;flex-direction:column}
figure.list .vega-bindings{order:-1;position:sticky;top:0;z-index:2;background:#fff;padding:6px 0;
 border-bottom:1px solid #ddd;display:flex;flex-wrap:wrap;gap:4px 16px}
table.comparison{width:100%}
table.comparison td{overflow-wrap:break-word}
section{scroll-margin-top:56px}
code{background:#f0f2f5;padding:0 3px;border-radius:3px}
"""

#: raw HTML off: anything in angle brackets from a study or its data is printed as text;
#: images off: the page requests nothing
_md = MarkdownIt("commonmark", {"html": False}).enable("table").disable("image")


#: Where :func:`bundle` keeps the bundle it built: the checkout's dbt target folder
#: (gitignored; LIBRARY_CACHE in lookahead.identity lives there too). The bundle is code
#: the page runs, so it is kept beside the code that writes it, never in a study's
#: results or raw folder: whoever can write here can edit the package itself.
BUNDLE_CACHE = Path("target") / "lookahead_page_bundle"


def _bundle_path(root: Path) -> Path:
    """The bundle's file for this vl-convert version and this EMBED: a new version or an
    edited EMBED is another file, so a kept bundle is never one the page would not get now."""
    version = getattr(vlc, "__version__", None) or metadata.version("vl-convert-python")
    key = hashlib.sha256(f"{version}\0{EMBED}".encode()).hexdigest()[:24]
    return root / BUNDLE_CACHE / f"{key}.js"


@lru_cache(maxsize=1)
def bundle(root: Path = PROJECT_ROOT) -> str:
    """vega-embed, Vega-Lite and Vega in one ES module, with EMBED appended.

    Building it is about a second of CPU (vl-convert bundles the JavaScript on each call)
    against a few milliseconds to read it back, and every report writes a page: the
    bundle is kept on disk (:data:`BUNDLE_CACHE`) and built again only for another
    vl-convert version or EMBED."""
    path = _bundle_path(root)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    script = vlc.javascript_bundle(EMBED)
    with contextlib.suppress(OSError):  # a read-only checkout: built again next time
        atomic_write_text(path, script)
    return script


def csp(script: str) -> str:
    """The page's Content-Security-Policy: nothing loads from anywhere, and the one script
    allowed to run is `script`, by its hash (a script element planted in the page has
    another hash and is refused)."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (
        "default-src 'none'; "
        f"script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
        "base-uri 'none'; form-action 'none'; object-src 'none'"
    )


def json_in_html(value: object) -> str:
    """JSON for a <script type="application/json"> element: `<`, `>` and `&` as \\u escapes,
    so no value can end the element or open a comment in it; JSON.parse reads it back."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _inline(text: str) -> str:
    return _md.renderInline(text)


def _table(item: Table) -> str:
    out = []
    if item.publication:
        body = gt_table(item).as_raw_html()
    else:
        if item.caption:
            out.append(f'<p class="caption">{_inline(item.caption)}</p>')
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in item.frame.columns)
        rows = "".join(
            "<tr>" + "".join(f"<td>{_inline(str(v))}</td>" for v in r) + "</tr>" for r in item.frame.itertuples(index=False)
        )
        body = (
            f'<table class="plain {html.escape(item.name)}" id="table-{html.escape(item.name)}">'
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )
    out.append(body)
    if item.csv:
        out.append(f'<p class="caption">File: <a href="{html.escape(item.csv)}">{html.escape(item.csv)}</a></p>')
    return "".join(out)


def _figure(item: Figure) -> str:
    spec = json_in_html(item.spec)
    cid = f"chart-{item.name}"
    kind = "chart list" if item.list_view else "chart"  # a list: filters above, rows in their own box
    return (
        f'<figure class="{kind}"><div id="{cid}" role="img" aria-label="{html.escape(item.title)}"></div>'
        f'<script type="application/json" data-chart="{cid}">{spec}</script></figure>'
    )


def _raw(item: Raw) -> str:
    # a Markdown section's PNG figures (the paper's) are drawn as interactive charts on this page instead
    text = re.sub(r"^!\[[^\]]*\]\([^)]*\)\s*$", "", item.markdown, flags=re.M)
    return _md.render(text).replace("<table>", '<table class="plain">')


def _item(item: Item) -> str:
    if isinstance(item, Para):
        return f"<p>{_inline(item.text)}</p>"
    if isinstance(item, Bullets):
        return "<ul>" + "".join(f"<li>{_inline(b)}</li>" for b in item.items) + "</ul>"
    if isinstance(item, Table):
        return _table(item)
    if isinstance(item, Figure):
        return _figure(item)
    if isinstance(item, Raw):
        return _raw(item)
    if isinstance(item, Links):
        return (
            "<ul>"
            + "".join(
                f"<li>{html.escape(label)}: "
                + ", ".join(f'<a href="{html.escape(p)}">{html.escape(p)}</a>' for p in paths)
                + "</li>"
                for label, paths in item.groups
                if paths
            )
            + "</ul>"
        )
    raise TypeError(f"no HTML for {type(item).__name__}")


def _section(sec: Section) -> str:
    tag = "h1" if sec.level == 1 else "h2"
    parts = [f'<section id="{html.escape(sec.key)}"><{tag}>{html.escape(sec.title)}</{tag}>']
    if sec.lead:
        parts.append(f'<p class="lead">{_inline(sec.lead)}</p>')
    for i, item in enumerate(sec.items):
        body = _item(item)
        if sec.level == 1 and i == 0 and isinstance(item, Para):
            body = body.replace("<p>", '<p class="verdict">', 1)
        parts.append(body)
    parts.append("</section>")
    if sec.key == "figures":  # the two key figures side by side on a wide screen
        inner = "".join(parts[2:-1]) if sec.lead else "".join(parts[1:-1])
        head = "".join(parts[:2]) if sec.lead else parts[0]
        return f'{head}<div class="figures">{inner}</div></section>'
    return "".join(parts)


def _short(sec: Section) -> str:
    """The section's name in the navigation bar: its title up to a colon or comma."""
    return "Verdict" if sec.level == 1 else re.split(r"[:,(]", sec.title)[0].strip()


def render(sections: list[Section], title: str) -> str:
    # no control byte from data reaches the file (lookahead.safe_output); the bundle is the package's
    nav = strip_controls("".join(f'<a href="#{html.escape(s.key)}">{html.escape(_short(s))}</a>' for s in sections))
    body = strip_controls("".join(_section(s) for s in sections))
    title = strip_controls(title)
    script = bundle()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp(script))}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
        f"<nav>{nav}</nav><main>{body}</main>"
        f'<script type="module">{script}</script></body></html>\n'
    )
