"""Research programs: measurements of the shipped test, not part of the package users import.

Each is run from a checkout (``python -m research.<name>``) and writes a committed JSON
result that the docs quote: ``montecarlo`` (size and power of the verdict,
docs/montecarlo.md), ``claims_extraction_benchmark`` (the claim-extraction job with a
real small model, docs/claims.md) and ``claims_extraction_recall`` (a study's extractions
against the demo's planted claims).
"""
