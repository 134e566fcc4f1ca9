"""Shared code of the lookahead-bias test: study configuration, LLM backends and
cache, recall/Min-K% scoring, statistics and the report.

The dbt Python models and the LLM jobs import this package so that each rule
(label summation, Min-K%, one-sided p-values, the verdict) exists once."""

__version__ = "0.1.0"
