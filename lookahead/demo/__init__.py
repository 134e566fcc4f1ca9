"""The demo study with known ground truth.

A seeded generator makes fictional firms with dated headlines and realized outcomes
(``generator``); a training corpus plants the realized outcomes of a known subset of
pre-cutoff observations into one small causal LM (``corpus``, ``tokenizer``, ``train``)
and gives a clean control the same confidence without the knowledge. The whole test
must find contamination in the first model and not in the second; ``build`` makes
everything from one seed (research/montecarlo.py measures the test's size and power over
fresh draws).
"""
