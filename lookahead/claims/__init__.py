"""Claim-level leakage (seed 002, "All Leaks Count, Some Count More").

A forecaster's rationale is split into atomic claims (``schema``), each claim is dated
and marked leaked / not leaked / unverifiable against the reference date t_ref
(``dating``), each claim's influence on the prediction is its Shapley value over claim
coalitions (``shapley``), and the two combine into OLR and Shapley-DCLR (``metrics``).
``retrieval`` ranks corpus documents by BM25 for the support judgment, ``prompts``
holds every prompt of the pipeline, ``tables`` builds the dbt tables from the raw
JSONL, ``timespec`` is the five-phase agent and ``demo`` the demo with planted truth.
docs/claims.md describes the method and every choice.
"""
