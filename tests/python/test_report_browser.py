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

import pytest
from offline_page import CHARTS, CHARTS_RENDERED, CHROMIUM, DRAWN, offline_page
from study_grid import grid, render_study
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
