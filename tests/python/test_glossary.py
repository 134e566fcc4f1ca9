"""docs/glossary.md defines, once, the terms the README and the report use without
defining them, the README's quick start points to it, and the report links it (the link
itself: test_report_pages.test_the_report_links_the_glossary)."""

from __future__ import annotations

import re

from dbt_runner import ROOT

GLOSSARY = ROOT / "docs" / "glossary.md"
TERMS = (
    "LAP (lookahead propensity)",
    "U-D (UD)",
    "Censored",
    "Min-K% LAP",
    "beta_1, beta_2, beta_3",
    "theta",
    "Placebo",
    "CRV1",
    "WCR (restricted wild cluster bootstrap)",
    "G\\* (effective number of clusters)",
    "Effective cutoff",
    "OLR (Overall Leakage Rate)",
    "Shapley-DCLR (Shapley-weighted Decision-Critical Leakage Rate)",
    "Underpowered",
    "Parse rate",
)


def test_every_term_is_defined_once() -> None:
    text = GLOSSARY.read_text(encoding="utf-8")
    defined = re.findall(r"^- \*\*(.+?)\*\*", text, flags=re.M)
    assert len(defined) == len(set(defined)), "a term defined twice"
    for term in TERMS:
        assert any(term in d or d in term for d in defined) or f"**{term}**" in text, term


def test_the_readme_points_to_the_glossary() -> None:
    assert "docs/glossary.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_terms_the_report_names_beside_its_link_are_defined() -> None:
    """The report's glossary line names terms as examples: each is one the glossary defines."""
    from lookahead.pages.sections import glossary_para

    text = GLOSSARY.read_text(encoding="utf-8")
    defined = [d.lower() for d in re.findall(r"^- \*\*(.+?)\*\*", text, flags=re.M)]
    line = glossary_para(ROOT / "results" / "x").text
    named = [t.strip() for t in line[line.index("(") + 1 : line.index(")")].split(",") if t.strip() != "..."]
    assert len(named) >= 5
    missing = [t for t in named if not any(t.lower() in d for d in defined)]
    assert not missing, missing
