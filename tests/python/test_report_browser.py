"""The report pages in a real browser (`make test-browser`): headless Chromium (Debian's
`chromium`, driven by Playwright) opens each index.html offline with every network
request blocked and recorded, waits until every chart has rendered, and checks that each
chart drew an SVG, that the console has no error, and that no request left the file.
It saves a screenshot of the first screen and each page's size and render time under
benchmarks/results/.

Pages: a generated study (study_grid.py, with claim tables) always; the demo's pages
(results/demo_contaminated, results/demo_clean, results/compare) when `make demo` wrote
them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from offline_page import CHARTS, CHARTS_RENDERED, CHROMIUM, DRAWN, offline_page
from study_grid import grid, panels, render_study
from test_report_pages import _claims

from lookahead.pages.report import write_pages

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results"
DEMO_PAGES = [ROOT / "results" / n / "index.html" for n in ("demo_contaminated", "demo_clean", "compare")]
RENDER_TIMEOUT_MS = 60_000


def _open(page_path: Path, screenshot: Path | None = None) -> dict:
    with offline_page(page_path) as opened:
        page = opened.page
        start = time.perf_counter()
        page.goto(page_path.as_uri())
        page.wait_for_function(CHARTS_RENDERED, timeout=RENDER_TIMEOUT_MS)
        seconds = time.perf_counter() - start
        charts = page.evaluate(CHARTS)
        drawn = page.evaluate(DRAWN)
        first_screen = page.evaluate("document.body.innerText.slice(0, 2000)")
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot))
    return {
        "page": str(page_path.relative_to(ROOT)) if page_path.is_relative_to(ROOT) else page_path.name,
        "bytes": page_path.stat().st_size,
        "render_seconds": round(seconds, 3),
        "charts": charts,
        "drawn": drawn,
        "errors": opened.errors,
        "external_requests": opened.external,
        "first_screen": first_screen,
    }


def _measure(page_path: Path, script: str) -> dict:
    """What `script` finds on the page once its charts are drawn, offline; the page raised
    no error on the way."""
    with offline_page(page_path) as opened:
        opened.page.goto(page_path.as_uri())
        opened.page.wait_for_function(CHARTS_RENDERED, timeout=RENDER_TIMEOUT_MS)
        at = opened.page.evaluate(script)
    assert opened.errors == [], (page_path, opened.errors)
    return at


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("strong")
    render_study(next(s for s in grid() if s.name == "strong"), d)
    _claims(d)
    return write_pages(d).page


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `make test-browser` installs Debian's chromium")
def test_pages_render_offline_without_errors(generated):
    pages = [generated] + [p for p in DEMO_PAGES if p.exists()]
    shot = OUT / "report_page_first_screen.png"
    results = []
    for page in pages:
        first_demo = page == next((p for p in pages if p != generated), generated)
        r = _open(page, screenshot=shot if first_demo else None)
        assert r["charts"] >= 2 and r["drawn"] == r["charts"], r
        assert r["errors"] == [], r["errors"]
        assert r["external_requests"] == [], r["external_requests"]
        if page.parent.name != "compare":  # a study page: the answer on the first screen
            assert "Verdict:" in r["first_screen"] and "Checklist" in r["first_screen"]
        results.append({k: v for k, v in r.items() if k != "first_screen"})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report_pages.json").write_text(
        json.dumps(
            {
                "what": "each report page opened in headless Chromium (Playwright), network blocked: file "
                "size and the time from navigation until every chart has rendered",
                "browser": CHROMIUM,
                "viewport": [1280, 900],
                "pages": results,
            },
            indent=2,
        )
        + "\n"
    )


#: Where the claim browser's filters and rows are, after the claim section is scrolled to
#: the top of the window as a reader following the navigation bar gets it.
CLAIM_LAYOUT = """() => {
  document.getElementById('claims').scrollIntoView();
  const chart = document.getElementById('chart-claim_browser');
  const box = chart.closest('figure');
  const selects = [...chart.querySelectorAll('.vega-bindings select')].map(s => {
    const r = s.getBoundingClientRect(); return {top: r.top, bottom: r.bottom};
  });
  const bindings = chart.querySelector('.vega-bindings').getBoundingClientRect();
  const list = chart.querySelector('svg').getBoundingClientRect();
  return {selects, height: window.innerHeight, bindings_bottom: bindings.bottom, list_top: list.top,
          box_scrolls: box.scrollHeight > box.clientHeight};
}"""
#: Every element of the page that is wider than its box (a horizontal scroll), and where the
#: comparison table's Shapley-DCLR header ends.
WIDTHS = """() => {
  const wide = [document.documentElement, ...document.querySelectorAll('section, table, figure')]
    .filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => `${e.tagName.toLowerCase()}#${e.id || e.className}: ${e.scrollWidth} > ${e.clientWidth}`);
  const heads = [...document.querySelectorAll('#table-comparison th')];
  const dclr = heads.find(h => h.textContent === 'Shapley-DCLR');
  return {wide, width: window.innerWidth, heads: heads.map(h => h.textContent),
          dclr_right: dclr ? dclr.getBoundingClientRect().right : null};
}"""


def _many_claims(d: Path, instances: int = 40) -> int:
    """The claim tables of _claims, with the claim list grown to `instances` instances per
    agent (the demo's 214 claims and more): the list a reader filters."""
    claims = pd.read_csv(d / "claims.csv")
    copies = [claims.assign(instance_id=claims["instance_id"] + f"-{k:02d}") for k in range(1, instances // 3 + 1)]
    grown = pd.concat([claims, *copies], ignore_index=True)  # the scored instances kept
    grown.to_csv(d / "claims.csv", index=False)
    return len(grown)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `make test-browser` installs Debian's chromium")
def test_claim_filters_are_on_the_first_screen_of_the_claim_section(tmp_path):
    """A reader who opens the claim section sees the browser's three filters without
    scrolling, above the rows, and the rows scroll in their own box (they sat below a
    214-claim list, 3,500 px down). The demo's page too, when `make demo` wrote it."""
    d = tmp_path / "claims"
    render_study(next(s for s in grid() if s.name == "strong"), d)
    _claims(d)
    assert _many_claims(d) >= 200
    pages = [write_pages(d).page] + [p for p in DEMO_PAGES[:2] if p.exists()]
    for page_path in pages:
        at = _measure(page_path, CLAIM_LAYOUT)
        assert len(at["selects"]) == 3, at
        for s in at["selects"]:
            assert s["top"] >= 0 and s["bottom"] <= at["height"], (page_path, at)
        assert at["bindings_bottom"] <= at["list_top"] + 1, at  # the filters above the list
        assert at["box_scrolls"], at  # the rows in a box of their own, not the page's length


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `make test-browser` installs Debian's chromium")
def test_the_compare_page_fits_1280_pixels_with_the_key_columns_first(tmp_path):
    """At 1280 px nothing on the compare page scrolls sideways, and its table leads with the
    verdict and shows Shapley-DCLR on the screen (it needed a horizontal scroll that hid it).
    The demo's comparison too, when `make demo` wrote it."""
    from lookahead.config import Study
    from lookahead.measures import MEASURES
    from lookahead.pages.compare import StudyResult, write_compare
    from lookahead.pages.data import accuracy_by_lap_decile, lap_by_month

    results = []
    for name, dclr in (("strong", 0.545), ("none", 0.004)):
        spec = next(s for s in grid() if s.name == name)
        d = tmp_path / name
        render_study(spec, d)
        pre, post = panels(spec)
        # every measure of the registry, as a study computing all six (the demo's): a column each made the table too wide
        lap = pd.read_csv(d / "lap_distribution.csv")
        every_measure = pd.concat([lap.assign(measure=m) for m in MEASURES], ignore_index=True)
        results.append(
            StudyResult(
                Study.from_json(str(pd.read_csv(d / "study_settings.csv")["settings_json"].iloc[0])),
                d / "none.duckdb",
                pd.read_csv(d / "verdict.csv").iloc[0],
                every_measure,
                pd.DataFrame({"agent": ["planted", "timespec"], "shapley_dclr": [dclr, 0.0]}),
                lap_by_month(pre, post),
                accuracy_by_lap_decile(pre, post),
            )
        )
    _, generated = write_compare(results, tmp_path / "results" / "compare")
    pages = [generated] + [p for p in DEMO_PAGES[2:] if p.exists()]
    for page_path in pages:
        at = _measure(page_path, WIDTHS)
        assert at["wide"] == [], (page_path, at)
        assert at["heads"][:2] == ["study", "verdict"] and "Shapley-DCLR" in at["heads"][:6], at
        assert at["dclr_right"] is not None and at["dclr_right"] <= at["width"], at
