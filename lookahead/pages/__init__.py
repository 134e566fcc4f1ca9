"""What a reader sees, in one package: the study's report pages (REPORT.md and index.html,
`report`), the comparison of several studies (`compare`), and the sections and renderers
they are drawn from.

A section (lookahead.pages.sections.SECTIONS) turns the result tables into a structured
block (lookahead.pages.blocks); lookahead.pages.markdown and lookahead.pages.html each
draw every block, so the two renderings cannot disagree on a number or on the order. The
cutoff and paper sections are written as Markdown (lookahead.pages.cutoff,
lookahead.pages.paper) and registered in SECTIONS like every other. Nothing below this
package imports it (docs/CONTRACTS.md, "The package by layer")."""
