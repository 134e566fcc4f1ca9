"""The LLM jobs: forecast (step 1), recall (step 2), Min-K% LAP, the claim jobs; each
appends raw JSONL per docs/CONTRACTS.md and can be rerun to resume. One registry
(llm_jobs.registry), one job process (llm_jobs.run_all) that `lookahead jobs` starts; one
job alone: ``lookahead jobs --study FILE --only NAME``."""
