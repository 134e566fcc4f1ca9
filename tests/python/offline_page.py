"""One report page in headless Chromium (Debian's `chromium`, driven by Playwright),
offline: every request but the page's own file is recorded and refused, and every
console error or warning and page error is collected. The browser tests
(test_report_browser.py, test_page_escaping.py) open pages through this one helper, so
they judge a page under the same conditions."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: True once every chart's script has rendered (each sets data-rendered on its element).
CHARTS_RENDERED = (
    "document.querySelectorAll('script[data-chart]').length === document.querySelectorAll('[data-rendered=\"true\"]').length"
)
CHARTS = "document.querySelectorAll('script[data-chart]').length"
#: Charts that drew an SVG or a canvas.
DRAWN = "[...document.querySelectorAll('[data-rendered=\"true\"]')].filter(e => e.querySelector('svg, canvas')).length"


@dataclass
class OfflinePage:
    page: Any  # playwright's Page
    errors: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)


@contextmanager
def offline_page(page_path: Path) -> Iterator[OfflinePage]:
    """A new browser and page at 1280x900 with the request block and the error
    collectors in place; the caller goes to ``page_path.as_uri()``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            ctx = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
            opened = OfflinePage(page=None)

            def block(route: Any) -> None:  # anything but the page's own file is recorded and refused
                if route.request.url != page_path.as_uri():
                    opened.external.append(route.request.url)
                    route.abort()
                else:
                    route.continue_()

            ctx.route("**/*", block)
            opened.page = ctx.new_page()
            opened.page.on("console", lambda m: opened.errors.append(m.text) if m.type in ("error", "warning") else None)
            opened.page.on("pageerror", lambda e: opened.errors.append(str(e)))
            yield opened
        finally:
            browser.close()
