"""`lookahead`: run a study end to end (LLM jobs, `dbt build`, report) with one command.

Each step is also runnable on its own (`python -m llm_jobs.run_all`, plain `dbt build`,
`lookahead report`); this wrapper only passes one study file to all three, so that dbt
and the jobs cannot disagree on a setting. User errors end in one line naming the
setting, column or file, never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from lookahead.config import (
    PROJECT_ROOT,
    STUDY_SETTINGS_ENV,
    Study,
    StudyConfigError,
    load_study,
)


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


def dbt_command(args: list[str]) -> list[str]:
    """The dbt command line. The study is not on it (no --vars): see :func:`study_env`."""
    dbt = Path(sys.executable).with_name("dbt")
    return [str(dbt) if dbt.exists() else "dbt", *args, "--project-dir", str(PROJECT_ROOT)]


@contextmanager
def study_env(study_file: str | None, overrides: dict | None = None) -> Iterator[dict[str, str]]:
    """dbt's environment for a study: its resolved settings (the file and the overrides)
    in a temporary JSON file that $LOOKAHEAD_STUDY_SETTINGS names, read by the project's
    DuckDB plugin when dbt opens the database (lookahead.config.dbt_study).

    Why not --vars: dbt re-parses the whole project whenever --vars change, so each new or
    edited study paid a full parse; the variable is invisible to dbt's parser
    (docs/CONTRACTS.md, "How a study reaches dbt")."""
    study = load_study(study_file, overrides=overrides)
    with tempfile.TemporaryDirectory(prefix="lookahead-dbt-") as tmp:
        settings = Path(tmp) / "study.json"
        # in the study's own order (settings_json sorts keys): a label mapping's order is
        # the order of the columns it makes (stg_recall_responses)
        settings.write_text(json.dumps(study.vars, default=str), encoding="utf-8")
        yield {**dbt_env(), STUDY_SETTINGS_ENV: str(settings)}


_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Failed|Exception)): (.*)$")


def without_tracebacks(lines: Iterable[str]) -> Iterator[str]:
    """dbt's output with each Python traceback (a failed gate in a dbt Python model)
    reduced to its last line, the exception message, which names what failed."""
    in_traceback = False
    for line in lines:
        if "Traceback (most recent call last):" in line:
            in_traceback = True
            continue
        if in_traceback:
            match = _EXCEPTION_LINE.match(line)
            if match:
                in_traceback = False
                yield f"  {match.group(1)}: {match.group(2)}\n"
            continue
        yield line


def run_dbt(args: list[str], study_file: str | None, overrides: dict | None = None) -> int:
    """dbt as a subprocess; its output is passed through without Python tracebacks
    (LOOKAHEAD_DEBUG=1 keeps them)."""
    cmd = dbt_command(args)
    then = "its partial results are marked unfinished; rerun the same command"
    with study_env(study_file, overrides) as env:
        if os.environ.get("LOOKAHEAD_DEBUG"):
            return killed_is_one_line(subprocess.call(cmd, cwd=PROJECT_ROOT, env=env), "dbt was", then)
        with subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in without_tracebacks(proc.stdout):
                sys.stdout.write(line)
                sys.stdout.flush()
    return killed_is_one_line(proc.returncode, "dbt was", then)


def run_jobs(study_file: str | None, yes: bool, extra: list[str], overrides: dict | None = None) -> int:
    cmd = [sys.executable, "-m", "llm_jobs.run_all"]
    if study_file:
        cmd += ["--study", study_file]
    if yes:
        cmd.append("--yes")
    if overrides and overrides.get("subsample_rows") is not None:
        cmd += ["--subsample", str(overrides["subsample_rows"]),
                "--seed", str(overrides.get("subsample_seed", 0))]
    if overrides and overrides.get("accept_low_parse_rate"):
        cmd.append("--accept-low-parse-rate")
    return killed_is_one_line(subprocess.call(cmd + extra, cwd=PROJECT_ROOT, env=dbt_env()), "the LLM jobs were",
                              "finished answers are saved; rerun the same command to resume")


def killed_is_one_line(rc: int, what: str, then: str) -> int:
    """A child's exit status; a child killed by a signal (an out-of-memory kill is SIGKILL)
    gets one line saying so and what to do, and a non-zero exit (128 + the signal)."""
    if rc >= 0:
        return rc
    import signal

    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    hint = " (the system may have run out of memory)" if -rc == signal.SIGKILL else ""
    # on a line of its own: the killed child may have left its progress bar's line open
    print(f"\nerror: {what} killed by {name}{hint}; {then}", file=sys.stderr)
    return 128 - rc


def report(study: Study) -> int:
    from lookahead.report import ReportError, write_report

    try:
        files = write_report(study, extra=_paper_sections())
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"Verdict: {files.verdict}")
    print(f"Report: {files.report.relative_to(PROJECT_ROOT) if files.report.is_relative_to(PROJECT_ROOT) else files.report}")
    print(f"Database: {study.database}")
    return 0


def _paper_sections():
    """The paper's tables and figures, then the claim-level section, as extra report
    sections (each empty when its models were not built)."""
    from lookahead.claims.report_section import claims_section
    from lookahead.paper.report_section import paper_section

    sections = [paper_section, claims_section]

    def combined(con, results_dir):
        return "".join(f(con, results_dir) for f in sections)
    return combined


JOB_OPTIONS_NOTE = (
    "Other options (--allow-sampling) are passed to the LLM jobs; see "
    "`python -m llm_jobs.run_all --help`.")


def build_parser() -> argparse.ArgumentParser:
    """The command line. Help texts are argparse format strings: a literal percent sign
    is written %% (as in Min-K%%)."""
    parser = argparse.ArgumentParser(prog="lookahead", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (
        ("jobs", "run the forecast, recall and Min-K%% queries (raw JSONL)"),
        ("build", "dbt build: validate, merge, gate, regress"),
        ("report", "write results/REPORT.md, CSVs, .dta panels and the Stata do-file"),
        ("run", "jobs, build and report in one go"),
    ):
        p = sub.add_parser(name, help=help_, description=help_.replace("%%", "%"),
                           epilog=JOB_OPTIONS_NOTE if name in ("jobs", "run") else None)
        p.add_argument("--study", help="study file (YAML of dbt var overrides)")
        if name in ("jobs", "run"):
            p.add_argument("--yes", action="store_true", help="do not ask before querying")
        if name == "run":
            p.add_argument("--rebuild", action="store_true",
                           help="run dbt build even when the last build is up to date (same "
                                "settings, input files and code, and it passed)")
        p.add_argument("--subsample", type=int, default=None, metavar="N",
                       help="analyse a seeded random subsample of N valid rows (the study "
                            "setting subsample_rows for this command)")
        p.add_argument("--seed", type=int, default=None, metavar="S",
                       help="subsample seed (the setting subsample_seed; default 0)")
        p.add_argument("--accept-low-parse-rate", action="store_true",
                       help="accept a forecast parse rate below 95%% for this command (the setting "
                            "accept_low_parse_rate; the study file is not edited: the build "
                            "records it and the report says so)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; any failure ends in one line on stderr, never a traceback."""
    from llm_jobs.common import guarded_line

    return guarded_line(lambda: _main(argv))


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.study:  # a study file is relative to where you are; paths inside it to the project
        args.study = str(Path(args.study).resolve())
    os.chdir(PROJECT_ROOT)
    overrides = {}
    if args.subsample is not None:
        overrides = {"subsample_rows": args.subsample, "subsample_seed": args.seed or 0}
    if args.accept_low_parse_rate:
        overrides["accept_low_parse_rate"] = True
    try:
        study = load_study(args.study, overrides=overrides)
    except StudyConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command in ("jobs", "run"):
        rc = run_jobs(args.study, args.yes, extra, overrides)
        if not rc:  # the claim jobs, when the study has claim settings (lookahead.claims.run)
            from lookahead.claims.run import run_claim_jobs
            rc = run_claim_jobs(study, args.study, args.yes)
        if rc or args.command == "jobs":
            return rc
    build = args.command in ("build", "run")
    if args.command == "run" and not args.rebuild:  # `lookahead build` always builds
        from lookahead.identity import build_up_to_date

        up_to_date, why = build_up_to_date(study)
        build = up_to_date is None
        print(f"build up to date: dbt invocation {up_to_date} of study '{study.name}' (settings, "
              "input files and code unchanged; --rebuild forces dbt build)" if up_to_date
              else f"dbt build: {why}")
    if build:
        from lookahead.identity import retire_results

        # the build replaces the results: a build that does not finish leaves none that read as its own
        retire_results(study.results_dir, "a new dbt build was started after they were written")
        rc = run_dbt(["build"], args.study, overrides)
        if 0 < rc < 128:  # a killed dbt has said so in its own line
            print("error: dbt build failed (see the messages above); no report written", file=sys.stderr)
        if rc:
            return rc
    if args.command in ("report", "run"):
        return report(study)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
