"""Standalone LLM jobs: forecast (step 1), recall (step 2), Min-K% LAP; each appends raw
JSONL per docs/CONTRACTS.md and can be rerun to resume (``python -m llm_jobs.<job>``)."""
