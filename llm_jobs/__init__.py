"""The LLM jobs: forecast (step 1), recall (step 2), Min-K% LAP, the claim jobs; each
appends raw JSONL per docs/CONTRACTS.md and can be rerun to resume. One registry
(llm_jobs.registry), one job process (llm_jobs.run_all) that `lookahead jobs` starts; one
job alone: ``lookahead jobs --study FILE --only NAME``."""

import sys

#: The modules run as programs (`python -m`): the job process `lookahead jobs` and `run`
#: start, and `lookahead check`'s preflight (tests/python/test_cli.py: PACKAGE_MAINS).
PROCESSES = ("llm_jobs.run_all", "llm_jobs.preflight")


def _job_module_run_as_a_program(argv: list[str]) -> str | None:
    """The line for ``python -m llm_jobs.<job>`` (``argv``: the interpreter's command line),
    else None. Why: a job module has no entry point, so Python would import it and exit 0
    having run nothing, and a command from an older doc or script would pass in silence."""
    if "-m" not in argv[:-1]:
        return None
    module = argv[argv.index("-m") + 1]
    if not module.startswith("llm_jobs.") or module in PROCESSES:
        return None
    job = module.removeprefix("llm_jobs.")
    return f"error: {module} is not a command; one job alone: lookahead jobs --study FILE --only {job}"


if sys.argv[:1] == ["-m"]:  # this package is being imported to run one of its modules (python -m)
    _line = _job_module_run_as_a_program(list(getattr(sys, "orig_argv", [])))
    if _line:
        print(_line, file=sys.stderr)
        raise SystemExit(2)
