"""The study's report pages: REPORT.md and index.html drawn from one list of sections.

A section (lookahead.pages.sections.SECTIONS) turns the result tables into a structured
block (lookahead.pages.blocks); lookahead.pages.markdown and lookahead.pages.html each
draw every block, so the two renderings cannot disagree on a number or on the order."""
