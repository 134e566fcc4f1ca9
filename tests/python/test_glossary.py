"""docs/glossary.md defines, once, the terms the README and the report use without
defining them, and the README's quick start points to it."""

from __future__ import annotations

import re

from dbt_runner import ROOT

GLOSSARY = ROOT / "docs" / "glossary.md"
TERMS = ("LAP (lookahead propensity)", "U-D (UD)", "Censored", "Min-K% LAP", "beta_1, beta_2, beta_3",
         "theta", "Placebo", "CRV1", "WCR (restricted wild cluster bootstrap)", "G\\* (effective number of clusters)",
         "Effective cutoff", "OLR (Overall Leakage Rate)",
         "Shapley-DCLR (Shapley-weighted Decision-Critical Leakage Rate)", "Underpowered", "Parse rate")


def test_every_term_is_defined_once() -> None:
    text = GLOSSARY.read_text(encoding="utf-8")
    defined = re.findall(r"^- \*\*(.+?)\*\*", text, flags=re.M)
    assert len(defined) == len(set(defined)), "a term defined twice"
    for term in TERMS:
        assert any(term in d or d in term for d in defined) or f"**{term}**" in text, term


def test_the_readme_points_to_the_glossary() -> None:
    assert "docs/glossary.md" in (ROOT / "README.md").read_text(encoding="utf-8")
