"""The paper's full analysis ("A Test of Lookahead Bias in LLM Forecasts", Tables I-VI,
Figure III) on the study panel: fixed-effects tables (tables.py, fit.py), the fast pairs
bootstrap (bootstrap.py), paper-style Markdown/LaTeX rendering (render.py), figures
(figures.py), and the entry points of the dbt models (dbt_entry.py, analysis.py). The
report's paper section, which renders these tables, is lookahead.pages.paper. Protocol
regressions and the verdict live in lookahead.stats; this package reproduces the paper's
own specifications."""
