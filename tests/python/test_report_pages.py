"""REPORT.md and index.html as a reader meets them, on generated studies (study_grid.py)
rendered by the shipped code: the answer first (verdict paragraph of at most 80 words,
printed once; checklist; both key figures in the first 40 lines), checklist cells equal
to the verdict table's, fixed row orders, long tables sent to their CSV, and an offline
page that holds every chart spec of the sections."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_checker import check, sig_equal, tables
from study_grid import grid, render_study

from lookahead.pages.blocks import Figure
from lookahead.pages.data import hit_rates, wilson
from lookahead.pages.report import build_sections, write_pages
from lookahead.pages.summary import MAX_WORDS, caveats
from lookahead.stats.verdict import evaluate, facts_from_row

GRID = {s.name: s for s in grid()}
STUDIES = ["strong", "none", "censored", "unparsed", "strong_5_entities"]


def _claims(d: Path) -> None:
    """Claim tables shaped like the claim models' (three instances, two agents)."""
    rng = np.random.default_rng(0)
    claims = pd.DataFrame(
        [
            {
                "instance_id": f"c{i:02d}",
                "agent": agent,
                "task_kind": "classification",
                "claim_id": k,
                "claim_text": f"Claim {k} of c{i:02d} | with a bar",
                "category": "A1",
                "t_ref": "2022-03-01",
                "tau": None if k == 1 else f"2022-0{k}-10",
                "leakage_state": ["leaked", "not_leaked", "unverifiable"][k % 3],
                "shapley": float(rng.normal()),
            }
            for i in range(3)
            for agent in ("planted", "prudent")
            for k in range(1, 4)
        ]
    )
    inst = claims.groupby(["instance_id", "agent"]).size().rename("n_claims").reset_index()
    inst = inst.assign(status="ok", shapley_dclr=rng.uniform(size=len(inst)), efficiency_gap=1e-12)
    summ = pd.DataFrame(
        [
            {
                "agent": a,
                "task": "stock_direction",
                "task_kind": "classification",
                "n_instances": 3,
                "n_scored": 3,
                "n_claims": 9,
                "olr": 0.3,
                "olr_unverifiable_leaked": 0.6,
                "shapley_dclr": 0.2,
                "shapley_dclr_unverifiable_leaked": 0.4,
                "top1_leakage": 0.1,
                "top3_leakage": 0.2,
                "task_metric_name": "accuracy",
                "task_metric": 0.7,
                "accuracy": 0.7,
                "repred_metric_name": "abs error",
                "repred_error": 0.1,
                "n_repredicted": 30,
            }
            for a in ("planted", "prudent")
        ]
    )
    rep = pd.DataFrame(
        [
            {
                "instance_id": f"r{i:02d}",
                "agent": "planted",
                "task": "stock_direction",
                "prediction": 1,
                "repredicted": i % 2,
                "repred_metric_name": "abs error",
                "repred_error": float(i % 7),
            }
            for i in range(40)
        ]
    )
    hist = pd.DataFrame(
        [
            {"sample": s, "bin": b, "bin_lower": b / 10, "bin_upper": (b + 1) / 10, "n": 5 + b}
            for s in ("pre", "post")
            for b in range(10)
        ]
    )
    for name, df in (
        ("claims", claims),
        ("instance_leakage", inst),
        ("claims_summary", summ),
        ("claims_repredict", rep),
        ("lap_histogram", hist),
    ):
        df.to_csv(d / f"{name}.csv", index=False)


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    out = {}
    for name in STUDIES:
        d = tmp_path_factory.mktemp(name)
        render_study(GRID[name], d)
        if name == "strong":
            _claims(d)
        write_pages(d)
        out[name] = d
    return out


def test_the_report_links_the_glossary(studies, tmp_path):
    """REPORT.md and index.html link docs/glossary.md by a path relative to the folder the
    study's report is written to (results/<study>/ -> ../../docs/glossary.md), and the
    link leads to the file; a folder outside the checkout, with a space and parentheses in
    its name, gets a link that still resolves."""
    from urllib.parse import unquote

    from lookahead.config import PROJECT_ROOT, Study
    from lookahead.pages.sections import GLOSSARY, glossary_link

    d = studies["strong"]
    study = Study.from_json(str(pd.read_csv(d / "study_settings.csv").iloc[0]["settings_json"]))
    found = re.findall(r"\[glossary\]\(([^)\s]+)\)", (d / "REPORT.md").read_text())
    assert len(found) == 1, found
    href = found[0]
    assert (study.results_dir / unquote(href)).resolve() == GLOSSARY.resolve() and GLOSSARY.is_file()
    assert f'<a href="{href}">glossary</a>' in (d / "index.html").read_text()
    assert glossary_link(PROJECT_ROOT / "results" / "demo_contaminated") == "../../docs/glossary.md"
    odd = tmp_path / "my results (v2)" / "study"
    link = glossary_link(odd)
    assert not re.search(r"[\s()]", link) and (odd / unquote(link)).resolve() == GLOSSARY.resolve()


def test_what_every_report_shares_is_written_once_and_linked(studies):
    """The choices where the protocol is silent, the units rule and the claim method are in
    docs/reading.md ("How to read this report"), which every report links from its head and
    from the verdict and claim sections, and no report repeats them."""
    from urllib.parse import unquote

    from lookahead.config import Study
    from lookahead.pages.sections import READING
    from lookahead.stats.verdict import UNITS_RULE

    doc = " ".join(READING.read_text(encoding="utf-8").split())
    assert " ".join(UNITS_RULE.split()) in doc
    for heading in ("## Choices where the protocol is silent", "## The figures", "## Claim-level leakage"):
        assert heading in doc, heading
    for name, d in studies.items():
        text = (d / "REPORT.md").read_text()
        study = Study.from_json(str(pd.read_csv(d / "study_settings.csv").iloc[0]["settings_json"]))
        links = re.findall(r"\[How to read this report\]\(([^)\s]+)\)", text)
        assert len(links) >= 2, (name, links)  # the head and the verdict section (and the claim section)
        assert {(study.results_dir / unquote(h)).resolve() for h in links} == {READING.resolve()}
        assert UNITS_RULE[:60] not in text and "Choices where the protocol is silent (docs/verdict.md)" not in text
        assert "Rationales split into atomic claims" not in text
        html = (d / "index.html").read_text()
        assert f'<a href="{links[0]}">How to read this report</a>' in html


def _layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def _title(spec: dict) -> str:
    t = spec.get("title", "")
    return " ".join(t) if isinstance(t, list) else str(t)


def test_every_figure_says_what_it_plots(studies):
    """Each chart's title names the measure it draws (the registry's label) and, for
    deciles, the rule that formed them; month axes carry the year; pre and post differ by
    marker as well as colour; no legend cuts a label; the claims figure hatches leaked
    claims, labels each bar with the claim's first words and shows the whole text on hover."""
    from lookahead.measures import MEASURES
    from lookahead.paper.figures import DECILE_RULE

    d = studies["strong"]
    sections, _ = build_sections(d)
    figs = {i.name: i for s in sections for i in s.items if isinstance(i, Figure)}
    label = MEASURES["recall"].label
    for name in ("lap_by_month", "accuracy_by_lap_decile", "lap_histogram"):
        assert label in _title(figs[name].spec), (name, _title(figs[name].spec))
    assert DECILE_RULE in _title(figs["accuracy_by_lap_decile"].spec)
    assert DECILE_RULE in figs["accuracy_by_lap_decile"].title
    month = next(layer for layer in _layers(figs["lap_by_month"].spec) if layer["mark"].get("type", layer["mark"]) == "line")
    assert month["encoding"]["x"]["axis"]["format"] == "%Y-%m"
    for name in ("lap_by_month", "accuracy_by_lap_decile"):
        line = next(layer for layer in _layers(figs[name].spec) if "shape" in layer.get("encoding", {}))
        assert line["encoding"]["shape"]["field"] == "sample"
        assert line["encoding"]["shape"]["scale"]["range"][0] != line["encoding"]["shape"]["scale"]["range"][1]
        legend = next(x for x in _layers(figs[name].spec) if "legend" in x.get("encoding", {}).get("color", {}))
        assert legend["encoding"]["color"]["legend"]["labelLimit"] == 0  # no label cut short
    bars, hatched = _layers(figs["claims_shapley"].spec)
    assert hatched["mark"]["fill"]["gradient"] == "linear" and len(hatched["mark"]["fill"]["stops"]) > 20
    assert hatched["transform"] == [{"filter": "datum.leakage_state == 'leaked'"}]
    assert any(t.get("field") == "claim_text" for t in bars["encoding"]["tooltip"])
    values = (bars.get("data") or figs["claims_shapley"].spec["data"])["values"]
    assert {v["leakage_state"] for v in values} >= {"leaked", "not_leaked"}
    for v in values:  # "instance #claim: first words of the claim"
        head, words = v["label"].split(": ", 1)
        assert head.startswith(f"{v['instance_id']} #{v['claim_id']}") and v["claim_text"].startswith(words.rstrip("\u2026"))


def _verdict_line(text: str) -> str:
    return re.search(r"^\*\*Verdict: .+$", text, re.M).group(0)


@pytest.mark.parametrize("name", STUDIES)
def test_the_answer_comes_first(studies, name):
    d = studies[name]
    text = (d / "REPORT.md").read_text()
    assert check(text, d) == []
    line = _verdict_line(text)
    paragraph = line.split(".** ", 1)[1]
    assert len(paragraph.split()) <= MAX_WORDS, paragraph
    assert text.count(paragraph) == 1 and text.count("**Verdict:") == 1
    first = "\n".join(text.splitlines()[:40])
    assert line in first and "## Checklist" in first
    assert "](figures/lap_by_month.png)" in first
    if len(pd.read_csv(d / "accuracy_by_lap_decile.csv")):
        assert "](figures/accuracy_by_lap_decile_prepost.png)" in first
    else:  # no parsed forecast: the figure's place says why it is missing
        assert "No accuracy-by-decile figure: fewer than 10 rows" in first
    assert (d / "figures" / "lap_by_month.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every section opens with one line that says what it shows
    for block in re.split(r"(?m)^## ", text)[1:]:
        lines = [x for x in block.splitlines()[1:] if x.strip()]
        assert lines[0].startswith("_") and lines[0].endswith("_"), block[:80]


def test_caveats_reach_the_paragraph(studies):
    text = (studies["strong_5_entities"] / "REPORT.md").read_text()
    assert "only 5 clusters (fewer than 20)" in _verdict_line(text)
    v = pd.read_csv(studies["strong"] / "verdict.csv").iloc[0]
    o = evaluate(facts_from_row(v))
    cens = pd.DataFrame(
        [
            {
                "sample": "pre",
                "share_up_censored": 0.0,
                "share_down_censored": 0.0,
                "share_unknown_censored": 1.0,
                "share_up_and_down_censored": 0.0,
            }
        ]
    )
    found = caveats(
        o, {"input rows": 300, "rejected rows": 0, "rows without a forecast": 0, "rows with an unparsed forecast": 30}, cens
    )
    assert [c.text for c in found] == [
        "recall label 'unknown' censored in 100% of pre-cutoff pairs",
        "30 of 300 input rows (10%) excluded",
    ]
    assert caveats(o, {"input rows": 300, "rows with an unparsed forecast": 15}, cens.assign(share_unknown_censored=0.5)) == []


@pytest.mark.parametrize("name", STUDIES)
def test_checklist_cells_equal_the_verdict_table(studies, name):
    d = studies[name]
    v = pd.read_csv(d / "verdict.csv").iloc[0]
    rows = next(t for t in tables((d / "REPORT.md").read_text()) if t and "p the rule read" in t[0])
    by = {(r["step"], r["tested"][:12]): r for r in rows}
    assert rows[-1]["result"] == v["verdict"]
    det = next(r for r in rows if r["step"] == "4. Detection")
    if math.isfinite(float(v["beta3"])) and math.isfinite(float(v["beta3_p_used"])):
        m = re.match(r"(\S+) \(t (\S+)\)$", det["estimate (t)"])
        assert sig_equal(m.group(1), repr(float(v["beta3"]))) and sig_equal(m.group(2), repr(float(v["beta3_t"])))
        p = re.match(r"one-sided p (< )?(\S+)", det["p the rule read"])
        assert p.group(1) or sig_equal(p.group(2), repr(float(v["beta3_p_used"])))
        assert re.search(rf"by {v['inference_used']}( \(\d+ draws\))?$", det["p the rule read"])
    else:
        assert det["estimate (t)"] == "not estimable"
    plc = next(r for r in rows if r["step"] == "5. Placebo")
    assert plc["result"].startswith("passed") == bool(v["placebo_passes"]) or "not read" in plc["result"]
    val = [r for r in rows if r["step"] == "3. Validation"]
    assert all(r["result"].startswith("passed") for r in val) == bool(v["validation_pattern"])
    assert by[("2. LAP varies", "sd of pre-cu")]["result"] == ("passed" if bool(v["lap_varies"]) else "failed")


def test_validation_on_a_null_path_reads_as_descriptive(studies):
    text = (studies["none"] / "REPORT.md").read_text()
    val = text.split("## 3. Validation")[1].split("## 4.")[0]
    assert "validation fails" not in val and "little power" not in val
    assert "stops at the detection test, so validation is descriptive here" in val
    verdict = text.split("## 6. Verdict")[1].split("\n## ")[0]
    assert "Mixed/invalid:" not in verdict and "No evidence of contamination: beta_3 indistinguishable" in verdict


def test_fixed_row_orders(studies, tmp_path):
    d = studies["strong"]
    for f in d.glob("*.csv"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    lapd = pd.DataFrame(
        [
            {
                "measure": m,
                "sample": s,
                "n": 1,
                "mean": 0.1,
                "sd": 0.1,
                "min": 0,
                "p25": 0,
                "median": 0,
                "p75": 0,
                "max": 0,
                "is_selected_measure": m == "recall",
            }
            for s in ("post", "pre")
            for m in ("zlib", "recall", "mink")
        ]
    )
    lapd.to_csv(tmp_path / "lap_distribution.csv", index=False)
    text = write_pages(tmp_path).report.read_text()
    rows = next(t for t in tables(text.split("## 2.")[1]) if t and "measure" in t[0])
    assert [(r["measure"], r["sample"]) for r in rows] == [
        ("recall", "pre"),
        ("recall", "post"),
        ("mink", "pre"),
        ("mink", "post"),
        ("zlib", "pre"),
        ("zlib", "post"),
    ]
    hr = next(t for t in tables(text) if t and "LAP half" in t[0])
    assert [(r["sample"], r["LAP half"]) for r in hr] == [
        ("pre", "high LAP"),
        ("pre", "low LAP"),
        ("post", "high LAP"),
        ("post", "low LAP"),
    ]


def test_long_tables_go_to_their_csv(studies):
    text = (studies["strong"] / "REPORT.md").read_text()
    for t in tables(text):
        assert len(t) <= 25
    assert "The 10 instances with the largest error, of 40; every instance in `claims_repredict.csv`." in text
    worst = next(t for t in tables(text) if t and "re-prediction" in t[0])
    assert [float(r["error"]) for r in worst] == sorted([float(r["error"]) for r in worst], reverse=True)


def test_hit_rates_and_wilson_interval():
    from statsmodels.stats.proportion import proportion_confint

    for hits, n in ((143, 159), (0, 12), (12, 12), (5, 9)):
        lo, hi = proportion_confint(hits, n, alpha=0.05, method="wilson")
        assert wilson(hits, n) == pytest.approx((lo, hi), abs=1e-12)
    pre = pd.DataFrame(
        {"mu_hat": [1, -1, 1, 1, 0, -1], "outcome": [0.5, 0.2, -0.1, 0.3, 1.0, -2.0], "high_lap": [1, 1, 1, 0, 0, 0]}
    )
    hr = hit_rates(pre, pre.iloc[0:0])
    assert hr[["sample", "lap_half", "n", "hits"]].values.tolist() == [
        ["pre", "high LAP", 3, 1],
        ["pre", "low LAP", 2, 2],
        ["post", "high LAP", 0, 0],
        ["post", "low LAP", 0, 0],
    ]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[tuple[str, str, str]] = []
        self.charts: dict[str, str] = {}
        self.sections: list[str] = []
        self.ids: set[str] = set()
        self._chart: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.attrs += [(tag, k, v or "") for k, v in attrs]
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "section":
            self.sections.append(a["id"])
        self._chart = a.get("data-chart") if tag == "script" else None

    def handle_data(self, data):
        if self._chart:
            self.charts[self._chart] = self.charts.get(self._chart, "") + data

    def handle_endtag(self, tag):
        if tag == "script":
            self._chart = None


def test_page_is_offline_and_holds_every_chart(studies):
    d = studies["strong"]
    html = (d / "index.html").read_text()
    page = _Page()
    page.feed(html)
    page.close()
    sections, _ = build_sections(d)
    assert page.sections == [s.key for s in sections]
    # no network: no src/href to http(s) or protocol-relative, no external script or stylesheet
    for tag, k, v in page.attrs:
        if k in ("src", "href", "action", "data", "poster"):
            assert not re.match(r"(?i)\s*(https?:)?//", v), (tag, k, v)
        assert not (tag == "script" and k == "src"), v
        assert not (tag == "link" and k == "rel" and "stylesheet" in v)
    assert "@import" not in html and "url(http" not in html
    figures = [i for s in sections for i in s.items if isinstance(i, Figure)]
    assert {f.name for f in figures} >= {
        "lap_by_month",
        "accuracy_by_lap_decile",
        "lap_histogram",
        "claims_shapley",
        "claim_browser",
    }
    for f in figures:
        assert json.loads(page.charts[f"chart-{f.name}"]) == json.loads(json.dumps(f.spec)), f.name
        assert f"chart-{f.name}" in page.ids
    browser = json.loads(page.charts["chart-claim_browser"])
    assert {p["name"] for p in browser["params"]} == {"agent", "leaked", "instance"}
    data = browser["data"]["values"]
    assert len(data) == len(pd.read_csv(d / "claims.csv"))
    assert {"instance_id", "agent", "tau", "t_ref", "leakage_state", "shapley"} <= set(data[0])
    links = {v for tag, k, v in page.attrs if tag == "a" and k == "href"}
    assert {p.name for p in d.glob("*.csv")} <= links
    assert {"tables/protocol_validation.tex", "tables/protocol_detection.tex"} <= links
    assert html.count('<script type="module">') == 1 and "data-rendered" in html.split('<script type="module">')[1]


def test_protocol_tables_in_latex_with_readable_labels(studies):
    tex = (studies["strong"] / "tables" / "protocol_detection.tex").read_text()
    assert "Forecast x LAP (beta\\_3)" in tex and "Post-cutoff (placebo)" in tex
    assert "mu\\_hat:lap" not in tex and not re.search(r"\de-\d", tex)


def test_a_stated_cutoff_outside_the_break_interval_reaches_the_paragraph(studies, tmp_path):
    """effective_cutoff (as the build writes it) with the stated cutoff outside the break's
    interval: a caveat in the verdict paragraph, the checklist's cutoff row, the
    section's warning, and the figure's effective-cutoff rule."""
    d = studies["strong"]
    for f in d.glob("*.csv"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    pd.DataFrame(
        [
            {
                "measure": "recall",
                "is_selected_measure": True,
                "status": "break",
                "break_month": "2021-09-01",
                "effective_cutoff": "2021-09-30",
                "interval_low_month": "2021-08-01",
                "interval_high_month": "2021-10-01",
                "interval_level": 0.95,
                "stated_cutoff": "2021-12-31",
                "stated_cutoff_month": "2021-12-01",
                "stated_in_interval": False,
                "mean_before": 0.5,
                "mean_after": 0.1,
                "sd_before": 0.2,
                "fall_sd": 2.0,
                "p_fall": 0.001,
                "n_before": 100,
                "n_after": 100,
            }
        ]
    ).to_csv(tmp_path / "effective_cutoff.csv", index=False)
    text = write_pages(tmp_path).report.read_text()
    line = _verdict_line(text)
    assert "the stated cutoff 2021-12-31 lies outside the effective cutoff's 95% interval (2021-08 to 2021-10)" in line
    assert len(line.split(".** ", 1)[1].split()) <= MAX_WORDS
    row = next(r for t in tables(text) for r in t if r.get("step") == "1. Cutoff")
    assert row["result"] == "stated cutoff outside the interval" and row["estimate (t)"].startswith("2021-09-30")
    assert "**Warning: the stated training cutoff (2021-12-31) lies outside" in text.split("Effective training cutoff")[1]
    sections, _ = build_sections(tmp_path)
    fig = next(i for s in sections for i in s.items if isinstance(i, Figure) and i.name == "lap_by_month")
    assert "effective cutoff 2021-09-30" in json.dumps(fig.spec)
    assert check(text, tmp_path) == []


def test_the_kept_script_bundle_is_what_vl_convert_builds_and_follows_its_inputs(tmp_path, monkeypatch):
    """The page's JavaScript is kept on disk after it is first built (building it is about
    a second of CPU a report): what is read back is what vl-convert builds, and another
    EMBED (or vl-convert version) is another file, never the old bundle."""
    import vl_convert as vlc

    from lookahead.pages import html as page_html

    def fresh(root: Path) -> str:
        page_html.bundle.cache_clear()
        return page_html.bundle(root)

    real, returned = vlc.javascript_bundle, []
    monkeypatch.setattr(vlc, "javascript_bundle", lambda embed: returned.append(real(embed)) or returned[-1])
    try:
        built = fresh(tmp_path)
        kept = list((tmp_path / page_html.BUNDLE_CACHE).glob("*.js"))
        assert len(returned) == 1 and len(kept) == 1
        assert kept[0].read_text(encoding="utf-8") == built == returned[0]  # what vl-convert built for EMBED
        monkeypatch.setattr(vlc, "javascript_bundle", lambda *a: pytest.fail("built again although kept"))
        assert fresh(tmp_path) == built  # read back, not built
        monkeypatch.setattr(page_html, "EMBED", page_html.EMBED + "\n// another")
        monkeypatch.setattr(vlc, "javascript_bundle", lambda embed: "bundle for " + embed)
        assert fresh(tmp_path) == "bundle for " + page_html.EMBED  # another EMBED: built for it
        assert len(list((tmp_path / page_html.BUNDLE_CACHE).glob("*.js"))) == 2
        unwritable = tmp_path / "a file, not a folder"
        unwritable.write_text("")
        assert fresh(unwritable) == "bundle for " + page_html.EMBED  # nowhere to keep it: built, no error
    finally:
        page_html.bundle.cache_clear()
