"""`lookahead`: run a study end to end (LLM jobs, `dbt build`, report) with one command.

Each step is also runnable on its own (`python -m llm_jobs.run_all`, plain `dbt build`,
`lookahead report`); this wrapper only passes one study file to all three, so that dbt
and the jobs cannot disagree on a setting. User errors end in one line naming the
setting, column or file, never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from lookahead.config import PROJECT_ROOT, Study, StudyConfigError, load_study, read_study_file


def dbt_env() -> dict[str, str]:
    """Environment for dbt: project profiles, no usage stats, caches inside the project."""
    env = dict(os.environ)
    env.setdefault("DBT_PROFILES_DIR", str(PROJECT_ROOT / "profiles"))
    env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "False"
    env.setdefault("MPLCONFIGDIR", str(PROJECT_ROOT / ".mplconfig"))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("GX_ANALYTICS_ENABLED", "False")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    return env


def dbt_command(args: list[str], study_file: str | None) -> list[str]:
    """The dbt command line for a study: its file's settings passed as --vars."""
    dbt = Path(sys.executable).with_name("dbt")
    cmd = [str(dbt) if dbt.exists() else "dbt", *args, "--project-dir", str(PROJECT_ROOT)]
    if study_file:
        cmd += ["--vars", json.dumps(read_study_file(study_file), default=str)]
    return cmd


def run_dbt(args: list[str], study_file: str | None) -> int:
    return subprocess.call(dbt_command(args, study_file), cwd=PROJECT_ROOT, env=dbt_env())


def run_jobs(study_file: str | None, yes: bool, extra: list[str]) -> int:
    cmd = [sys.executable, "-m", "llm_jobs.run_all"]
    if study_file:
        cmd += ["--study", study_file]
    if yes:
        cmd.append("--yes")
    return subprocess.call(cmd + extra, cwd=PROJECT_ROOT, env=dbt_env())


def report(study: Study) -> int:
    from lookahead.report import ReportError, write_report

    try:
        files = write_report(study, extra=_paper_sections())
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"Verdict: {files.verdict}")
    print(f"Report: {files.report.relative_to(PROJECT_ROOT) if files.report.is_relative_to(PROJECT_ROOT) else files.report}")
    return 0


def _paper_sections():
    """The paper's tables and figures, then the claim-level section, as extra report
    sections (each empty when its models were not built)."""
    sections = []
    try:
        from lookahead.paper.report_section import paper_section
        sections.append(paper_section)
    except ImportError:
        pass
    from lookahead.claims.report_section import claims_section
    sections.append(claims_section)

    def combined(con, results_dir):
        return "".join(f(con, results_dir) for f in sections)
    return combined


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lookahead", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (
        ("jobs", "run the forecast, recall and Min-K% queries (raw JSONL)"),
        ("build", "dbt build: validate, merge, gate, regress"),
        ("report", "write results/REPORT.md, CSVs, .dta panels and the Stata do-file"),
        ("run", "jobs, build and report in one go"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--study", help="study file (YAML of dbt var overrides)")
        if name in ("jobs", "run"):
            p.add_argument("--yes", action="store_true", help="do not ask before querying")
    args, extra = parser.parse_known_args(argv)
    os.chdir(PROJECT_ROOT)
    try:
        study = load_study(args.study)
    except StudyConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command in ("jobs", "run"):
        rc = run_jobs(args.study, args.yes, extra)
        if rc or args.command == "jobs":
            return rc
    if args.command in ("build", "run"):
        rc = run_dbt(["build"], args.study)
        if rc:
            print("error: dbt build failed (see the messages above); no report written", file=sys.stderr)
            return rc
    if args.command in ("report", "run"):
        return report(study)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
