"""Nothing from a study or its data becomes markup in the report pages.

Script is planted in every data-fed field the pages print: the model id (with backticks
that would close its code span), the data path, the prompts' outcome wording and
reference period, the labels, the claim texts, instance ids and agents of the claim
tables and the claim browser, the re-predicted answers, the query issues, the estimator's
warnings and the page title. The fast tests parse index.html and check that no element or
event handler from data exists, that the values are shown as text, and that the page
carries a Content-Security-Policy allowing only its own bundle. The browser test opens
the page in headless Chromium: no planted script runs, the charts render, the console
has no error, and a script element added to the page by hand is refused by the policy."""

from __future__ import annotations

import base64
import csv
import hashlib
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from offline_page import CHARTS, CHARTS_RENDERED, CHROMIUM, DRAWN, offline_page
from study_grid import grid, render_study
from test_report_pages import _claims

from lookahead.config import load_study
from lookahead.pages import html as page_html
from lookahead.pages.blocks import Bullets, Para, Section, Table
from lookahead.pages.markdown import render as render_markdown
from lookahead.pages.report import write_pages
from lookahead.pages.text import code

#: a value that closes a code span, opens a script, an event handler, a javascript: link
#: and an image, and formats
PAYLOAD = (
    "fs` <script>window.__pwned=1;document.title='PWNED'</script> "
    '<img src=x onerror="window.__pwned=2"> [l](javascript:window.__pwned=3) '
    "![i](http://evil.example/t.png) **b** <!-- `m"
)
#: the same without backticks: nothing to close, raw HTML straight in the text
BARE = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2> " + PAYLOAD.replace("`", "")
HOSTILE_SETTINGS = {
    "model_id": PAYLOAD,
    "data_path": "data/" + PAYLOAD.replace('"', ""),
    "outcome_description": PAYLOAD,
    "reference_period": PAYLOAD,
    "reference_model_id": PAYLOAD,
    "claims_task_description": PAYLOAD,
    "claims_model_id": PAYLOAD,
    "served_model": PAYLOAD,
    "recall_labels": {"up": "up<script>window.__pwned=4</script>", "down": "down", "unknown": "unknown"},
}


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside <code> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.codes: list[str] = []
        self._in_code = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "code":
            self._in_code += 1
            self.codes.append("")

    def handle_endtag(self, tag):
        if tag == "code":
            self._in_code -= 1

    def handle_data(self, data):
        if self._in_code:
            self.codes[-1] += data


def _plant(d: Path) -> None:
    """The study the build recorded, and the data tables, with script in every text field."""
    study = load_study(
        overrides={
            "study_name": "strong",
            "training_cutoff": "2021-12-31",
            "period_frequency": "month",
            "lap_measure": "recall",
            "high_lap_rule": "pooled_median",
            **HOSTILE_SETTINGS,
        }
    )
    pd.DataFrame([{"study_name": "strong", "settings_json": study.settings_json()}]).to_csv(d / "study_settings.csv", index=False)
    claims = pd.read_csv(d / "claims.csv")
    claims["claim_text"] = [PAYLOAD, BARE] * (len(claims) // 2) + [BARE] * (len(claims) % 2)
    claims["instance_id"] = claims["instance_id"] + "<script>window.__pwned=5</script>"
    claims["agent"] = claims["agent"] + "<img src=x onerror=window.__pwned=6>"
    claims.to_csv(d / "claims.csv", index=False)
    inst = pd.read_csv(d / "instance_leakage.csv")
    inst["instance_id"] = inst["instance_id"] + "<script>window.__pwned=5</script>"
    inst["agent"] = inst["agent"] + "<img src=x onerror=window.__pwned=6>"
    inst.to_csv(d / "instance_leakage.csv", index=False)
    summ = pd.read_csv(d / "claims_summary.csv")
    summ["agent"] = summ["agent"] + "<img src=x onerror=window.__pwned=6>"
    summ["task"] = PAYLOAD
    summ.to_csv(d / "claims_summary.csv", index=False)
    rep = pd.read_csv(d / "claims_repredict.csv")
    rep["prediction"] = BARE
    rep["instance_id"] = "AAPL<script>window.__pwned=7</script>"
    rep.to_csv(d / "claims_repredict.csv", index=False)
    pd.DataFrame([{"task": PAYLOAD, "issue": BARE, "n_queries": 3}]).to_csv(d / "query_issues.csv", index=False)
    res = pd.read_csv(d / "regression_results.csv")
    res["warning"] = "entity ACME<script>window.__pwned=8</script>: " + PAYLOAD
    res.to_csv(d / "regression_results.csv", index=False)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("planted")
    render_study(next(s for s in grid() if s.name == "strong"), d, draws=19)
    _claims(d)
    _plant(d)
    return write_pages(d).page


@pytest.fixture(scope="module")
def planted_compare(tmp_path_factory) -> Path:
    """The compare page of two generated studies whose model ids carry the payload."""
    from dataclasses import replace

    from test_compare import _generated

    from lookahead.config import Study, resolve
    from lookahead.pages.compare import write_compare

    d = tmp_path_factory.mktemp("compare")
    results = []
    for name, model in (("strong", PAYLOAD), ("none", BARE)):
        r = _generated(name, d)
        results.append(replace(r, study=Study(vars=resolve({**r.study.vars, "model_id": model}))))
    _, page = write_compare(results, d / "results" / "compare")
    return page


def _check_no_markup(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    tags = {t for t, _ in parser.tags}
    assert "img" not in tags and "iframe" not in tags and "object" not in tags, tags
    for tag, attrs in parser.tags:
        handlers = [a for a in attrs if a.startswith("on")]
        assert not handlers, (tag, attrs)
        assert not str(attrs.get("href") or "").lower().startswith("javascript:"), attrs
    scripts = [a for t, a in parser.tags if t == "script"]
    assert [a.get("type") for a in scripts].count("module") == 1, scripts
    assert all(a.get("type") in ("module", "application/json") for a in scripts), scripts
    assert "window.__pwned" not in page.split('<script type="module">', 1)[1], "planted text inside the bundle"
    return parser


def test_planted_study_page_has_no_markup_from_data(planted):
    page = planted.read_text(encoding="utf-8")
    parser = _check_no_markup(page)
    # the model id is printed whole, as text, in one code span
    assert PAYLOAD in parser.codes, [c for c in parser.codes if "fs" in c][:3]
    assert "&lt;script&gt;window.__pwned=1" in page
    report = (planted.parent / "REPORT.md").read_text(encoding="utf-8")
    assert code(PAYLOAD) in report  # REPORT.md: the same span, closed where it should be


def test_planted_compare_page_has_no_markup_from_data(planted_compare):
    page = planted_compare.read_text(encoding="utf-8")
    parser = _check_no_markup(page)
    assert PAYLOAD in parser.codes and BARE in parser.codes
    assert "Content-Security-Policy" in page.split("</head>", 1)[0]
    for row in csv.reader(open(planted_compare.parent / "comparison.csv", newline="", encoding="utf-8")):
        assert not any(cell.startswith(("=", "+", "@")) for cell in row), row


def test_page_carries_a_policy_allowing_only_its_bundle(planted):
    page = planted.read_text(encoding="utf-8")
    bundle = page.split('<script type="module">', 1)[1].rsplit("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(bundle.encode("utf-8")).digest()).decode()
    head = page.split("</head>", 1)[0]
    parser = _Tags()
    parser.feed(head)
    policies = [
        a["content"] for t, a in parser.tags if t == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy"
    ]
    assert len(policies) == 1
    policy = policies[0]
    assert f"script-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy.split("script-src", 1)[1].split(";", 1)[0]
    assert "unsafe-eval" not in policy
    # the policy comes before any script
    assert head.index("Content-Security-Policy") < page.index("<script")


def test_renderer_escapes_title_text_tables_and_bullets():
    sec = Section(
        "answer",
        PAYLOAD,
        PAYLOAD,
        [
            Para(PAYLOAD),
            Para(BARE),
            Para(f"Model {code(PAYLOAD)}"),
            Bullets((PAYLOAD, BARE)),
            Table(pd.DataFrame({PAYLOAD: [PAYLOAD], "b": [code(PAYLOAD)], "c": [BARE]}), "t", caption=BARE),
            Table(pd.DataFrame({BARE: [BARE]}), "pub", caption=BARE, publication=True),
        ],
        level=1,
    )
    page = page_html.render([sec], title=PAYLOAD)
    parser = _check_no_markup(page)
    assert PAYLOAD in parser.codes
    assert "<title>fs` &lt;script&gt;" in page
    md = render_markdown([sec])
    assert code(PAYLOAD) in md


def test_chart_json_cannot_end_its_element():
    spec = {"data": {"values": [{"t": "</script><script>window.__pwned=9</script><!--<script>"}]}}
    text = page_html.json_in_html(spec)
    assert "<" not in text and ">" not in text
    import json

    assert json.loads(text) == spec


@pytest.mark.parametrize("value", ["plain", "`", "a``b", "``", "` x `", " ", PAYLOAD, "tab\there\nline\x1b[31m\x00"])
def test_code_span_holds_the_value_verbatim(value):
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False})
    out = md.renderInline(code(value))
    assert out.startswith("<code>") and out.endswith("</code>") and out.count("<code>") == 1, out
    assert "\x00" not in out and "\x1b" not in out


def _open(page_path: Path) -> dict:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with offline_page(page_path) as opened:
        page = opened.page
        page.goto(page_path.as_uri())
        try:  # a page a planted script broke never finishes: report what ran instead
            page.wait_for_function(CHARTS_RENDERED, timeout=60_000)
        except PlaywrightTimeout:
            opened.errors.append("charts did not finish rendering in 60 s")
        return {
            "pwned": page.evaluate("window.__pwned === undefined ? null : window.__pwned"),
            "title": page.title(),
            "charts": page.evaluate(CHARTS),
            "drawn": page.evaluate(DRAWN),
            "injected": page.evaluate("document.querySelectorAll('img, iframe').length"),
            "errors": opened.errors,
            "external": opened.external,
        }


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `make test-browser` installs Debian's chromium")
def test_planted_page_runs_no_script_in_chromium(planted, tmp_path):
    r = _open(planted)
    assert r["pwned"] is None and r["title"] != "PWNED", r
    assert r["injected"] == 0, r
    assert r["charts"] >= 3 and r["drawn"] == r["charts"], r  # the claim browser included
    assert r["errors"] == [], r["errors"]
    assert r["external"] == [], r["external"]
    # the policy, not only the escaping: a script element added by hand does not run
    forged = tmp_path / "index.html"
    forged.write_text(
        planted.read_text(encoding="utf-8").replace("<main>", "<main><script>window.__pwned='forged'</script>", 1),
        encoding="utf-8",
    )
    f = _open(forged)
    assert f["pwned"] is None, f
    assert any("Content Security Policy" in e for e in f["errors"]), f["errors"]


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `make test-browser` installs Debian's chromium")
def test_planted_compare_page_runs_no_script_in_chromium(planted_compare):
    r = _open(planted_compare)
    assert r["pwned"] is None and r["title"] != "PWNED" and r["injected"] == 0, r
    assert r["charts"] >= 2 and r["drawn"] == r["charts"], r
    assert r["errors"] == [] and r["external"] == [], r
