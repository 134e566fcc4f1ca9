"""`lookahead`: run a study end to end (LLM jobs, `dbt build`, report) with one command.

Each step is also runnable on its own (`lookahead jobs`, `lookahead build`, `lookahead
report`); this wrapper reads the study file once, with the command's
overrides, and hands the jobs and dbt the same resolved settings file
(lookahead.children.resolved_settings), so that no two of them can disagree on a setting.
User errors end in one line naming the setting, column or file, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lookahead.children import failed_column_rules, job_python, resolved_settings, run_dbt, run_jobs
from lookahead.config import (
    PROJECT_ROOT,
    Study,
    load_study,
)
from lookahead.consent import add_consent_arguments

if TYPE_CHECKING:
    from lookahead.check_rules import Finding


def check(study: Study, study_file: str | None = None, settings: Path | None = None) -> int:
    """The study's settings (already loaded) and its data file: mapped columns, valid rows;
    then the LLM jobs' preflight (llm_jobs.preflight): every check `lookahead run` makes
    before its first query (placeholders, prompt lengths against the context, pre-cutoff
    rows, clusters, recall labels on the model's exact tokenizer), querying nothing.
    Between the two, lookahead.check_rules judges the study: a refusal ends the check
    (exit 2), warnings let it go on and end it with exit 5 when all else passes.
    ``settings``: the command's resolved settings file (lookahead.children.resolved_settings),
    which the preflight reads; written here when not given."""
    from lookahead.check_rules import EXIT_REFUSED, EXIT_WARNED, REFUSE, judge
    from lookahead.rows import release_freed_memory, scan_study_rows, zero_padding_warning

    destination_line(study)  # where the text would go, before anything is read; not allowed: one line (UserError)
    scan = scan_study_rows(study)  # a chunk of rows at a time: a 10-million-row file is not held
    print(
        f"study '{study.name}': settings OK (hash {study.settings_hash[:12]}); "
        f"{study.input.data_path}: {scan.n_queried} valid rows, {scan.n_rejected} rejected"
    )
    padding = zero_padding_warning(scan.queried_entities(), str(study.column_map["entity_id"]))
    if padding:
        print(padding, file=sys.stderr)
    # the study, not only the file (lookahead.check_rules), and its claim files when it has any
    findings = sorted([*judge(study, scan), *_claim_findings(study)], key=lambda f: f.level != REFUSE)
    refused = [f for f in findings if f.level == REFUSE]
    for finding in refused:
        print(f"{finding.level}: {finding.line}", file=sys.stderr)
    if refused:
        return EXIT_REFUSED
    del scan  # the preflight below scans them again, in its own process: not both at once
    release_freed_memory()
    with nullcontext(settings) if settings is not None else resolved_settings(study) as resolved:
        rc = run_jobs(resolved, study_file, True, [], module="llm_jobs.preflight")
    if rc:  # the preflight's refusal is the one line, as `lookahead run` gives it
        return rc
    for finding in findings:  # warnings, once everything a run checks has passed
        print(f"{finding.level}: {finding.line}", file=sys.stderr)
    return EXIT_WARNED if findings else rc


def destination_line(study: Study) -> None:
    """For an API backend, where the prompts and the key go (host, remote or not, the
    variable: never its value) and whether the person running the command allowed it
    (lookahead.consent); when not, ConsentError says what to pass."""
    from lookahead.consent import Destination

    b = study.backend
    if b.backend != "openai" or not b.base_url:
        return
    dest = Destination(str(b.base_url), str(b.api_key_env) if b.api_key_env else None)
    print(f"backend openai {dest.describe()}")
    dest.check(bool(b.allow_remote))
    if dest.remote:
        print(f"remote host {dest.host} allowed by --allow-remote (or $LOOKAHEAD_ALLOW_REMOTE) for this command")


def report(study: Study) -> int:
    from lookahead.pages.report import write_report

    files = write_report(study)  # a refused journal, manifest or symlinked folder: one line (UserError)
    print(f"Verdict: {files.verdict}")
    _print_where(files.report, files.page, study)
    return 0


def _print_where(report: Path, page: Path | None, study: Study, tables: str = "") -> None:
    for label, path in (("Report", report), ("Page", page)):
        if path is not None:
            print(f"{label}: {path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path}")
    print(f"Database: {study.database}" + (f" (tables {tables})" if tables else ""))


# --- what each kind of study runs (the setting study_kind) ----------------------------


@dataclass(frozen=True)
class StudyKind:
    """One kind of study (the setting ``study_kind``, its allowed values declared in
    lookahead/study_settings.yml; a test holds this table to them): whether it asks the
    protocol's queries, what `dbt build` builds, how it is checked and reported.

    Why a table: a claim-only study (seed 002 on one's own task: predictions, rationales
    and a dated corpus, no observations file) has no rows for the protocol's checks, jobs,
    models or report; each command reads its kind's entry rather than branching on a name."""

    meaning: str
    protocol_jobs: bool  # forecast, recall, Min-K% on data_path (llm_jobs.run_all)
    build_select: Callable[[Study], tuple[str, ...]]  # dbt build's selection of the study's nodes (none: every node)
    reuse_up_to_date_build: bool  # `lookahead run` skips a build whose inputs and code are unchanged
    check: Callable[[Study, str | None, Path | None], int]  # the study, its file, the resolved settings
    findings: Callable[[Study], list[Finding]]  # check's refusals and warnings, without its output
    report: Callable[[Study], int]


def _protocol_findings(study: Study) -> list[Finding]:
    from lookahead.check_rules import judge
    from lookahead.rows import scan_study_rows

    return [*judge(study, scan_study_rows(study)), *_claim_findings(study)]


def _protocol_selection(study: Study) -> tuple[str, ...]:
    """Every node, or every node but the claim path for a study without claim settings
    (lookahead.claims.inputs.protocol_build_selection, imported when needed: it imports pandas)."""
    from lookahead.claims.inputs import protocol_build_selection

    return protocol_build_selection(study)


def _claims_selection(_study: Study) -> tuple[str, ...]:
    """The claim path and what it reads."""
    from lookahead.claims.inputs import CLAIM_PATH

    return ("--select", "+" + CLAIM_PATH)


def _claim_findings(study: Study) -> list[Finding]:
    """The claim files' findings (lookahead.claims.study_check) for a study with claim
    settings; none for a study without."""
    from lookahead.claims.inputs import has_claims
    from lookahead.claims.study_check import judge_claims

    return judge_claims(study).findings if has_claims(study) else []


def _claims_check(study: Study, study_file: str | None, settings: Path | None) -> int:
    from lookahead.claims.study_check import check_claim_study

    return check_claim_study(study)


def _claims_findings(study: Study) -> list[Finding]:
    from lookahead.claims.study_check import judge_claims

    return judge_claims(study).findings


def _claims_report(study: Study) -> int:
    """A claim-only study's report (lookahead.pages.claims_report): its line per agent,
    then where the report, page and database are. No instance scored: one line, exit 2."""
    from lookahead.pages.claims_report import CLAIM_TABLES, write_claim_report

    files, lines = write_claim_report(study)  # nothing scored, or not current: one line (UserError)
    for line in lines:
        print(line)
    _print_where(files.report, files.page, study, ", ".join(CLAIM_TABLES[:-1]))
    return 0


STUDY_KINDS: dict[str, StudyKind] = {
    "protocol": StudyKind(
        "the lookahead-bias test on an observations file (seed 000), the claim tables beside "
        "it when the study has claim settings",
        True,
        _protocol_selection,
        True,
        check,
        _protocol_findings,
        report,
    ),
    "claims": StudyKind(
        "claim-level leakage alone (seed 002): predictions or task instances and a dated corpus",
        False,
        _claims_selection,
        False,
        _claims_check,
        _claims_findings,
        _claims_report,
    ),
}


def run_build_args(study: Study) -> tuple[str, ...]:
    """The flags of the build `lookahead run` and `lookahead build` make of the study: its
    kind's nodes (StudyKind.build_select) without dbt's unit tests
    (lookahead.identity.UNIT_TESTS_LEFT_OUT says why)."""
    from lookahead.identity import UNIT_TESTS_LEFT_OUT

    return (*STUDY_KINDS[study.output.study_kind].build_select(study), *UNIT_TESTS_LEFT_OUT)


JOB_OPTIONS_NOTE = (
    "Other options (--allow-sampling, --max-cost USD, --retry-failed) are passed to the LLM jobs' process (llm_jobs.run_all)."
)


def add_model_switch(p: argparse.ArgumentParser) -> None:
    """--model and its companions (lookahead.model_switch): the study on another model, as
    a study of its own, its file unchanged."""
    p.add_argument(
        "--model",
        default=None,
        metavar="MODEL",
        help="run the study on this model (id, or local weights folder) as its own study "
        "<study_name>__<model>, with its own database, cache and report; the study file "
        "is not edited",
    )
    p.add_argument("--backend", default=None, help="with --model: its backend (default: the study's)")
    p.add_argument("--base-url", default=None, help="with --model: its OpenAI-compatible endpoint")
    p.add_argument(
        "--training-cutoff",
        default=None,
        metavar="YYYY-MM-DD",
        help="with --model: its training cutoff (default: seeds/model_training_cutoffs.csv)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line. Help texts are argparse format strings: a literal percent sign
    is written %% (as in Min-K%%)."""
    parser = argparse.ArgumentParser(prog="lookahead", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (
        ("check", "check a study file and its data file without running anything"),
        ("jobs", "run the LLM jobs the study needs, protocol and claim, in one process (raw JSONL)"),
        ("build", "dbt build: validate, merge, gate, regress"),
        ("report", "write results/REPORT.md, CSVs, .dta panels and the Stata do-file"),
        ("run", "jobs, build and report in one go"),
    ):
        p = sub.add_parser(
            name, help=help_, description=help_.replace("%%", "%"), epilog=JOB_OPTIONS_NOTE if name in ("jobs", "run") else None
        )
        p.add_argument("--study", help="study file (YAML of dbt var overrides)")
        if name in ("jobs", "run"):
            p.add_argument(
                "--yes", action="store_true", help="do not ask before querying (never consent to a remote host: --allow-remote)"
            )
        if name in ("check", "jobs", "run"):
            add_consent_arguments(p)
        if name == "jobs":
            p.add_argument(
                "--only",
                action="append",
                default=[],
                metavar="JOB",
                help="run only this job, a name of the job registry (llm_jobs.registry: forecast, recall, mink, "
                "reference, claims_extract, claims_value, 'claims_rationale (temporal_hint)', ...), whether or not "
                "the study's settings call for it; repeatable",
            )
        if name in ("build", "run"):
            p.add_argument(
                "--rebuild",
                action="store_true",
                help="run dbt build even when the last build is up to date (same "
                "settings, input files and code, and it passed), with "
                "--full-refresh: it replaces the results of another study "
                "that shares this study's name and database",
            )
        p.add_argument(
            "--subsample",
            type=int,
            default=None,
            metavar="N",
            help="analyse a seeded random subsample of N valid rows (the study setting subsample_rows for this command)",
        )
        p.add_argument(
            "--seed", type=int, default=None, metavar="S", help="subsample seed (the setting subsample_seed; default 0)"
        )
        add_model_switch(p)
        p.add_argument(
            "--accept-low-parse-rate",
            action="store_true",
            help="accept a forecast parse rate below 95%% for this command (the setting "
            "accept_low_parse_rate; the study file is not edited: the build "
            "records it and the report says so)",
        )
    sub.add_parser(
        "init",
        help=INIT_HELP,
        add_help=False,
        description="lookahead init [--data FILE ...] [--claims --predictions FILE ...] [--no-input]",
    )
    sub.add_parser(
        "compare",
        help=COMPARE_HELP,
        add_help=False,
        description="lookahead compare STUDY.yml [STUDY.yml ...] [--db DB ...] [--out DIR]",
    )
    for group, commands in GROUPS.items():
        sub.add_parser(group, help="; ".join(f"{name}: {help_}" for name, (help_, _) in commands.items()), add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; any failure ends in one line on stderr, never a traceback."""
    from lookahead.guard import guarded_line

    return guarded_line(lambda: _main(argv))


def compare_main(argv: list[str]) -> int:
    """`lookahead compare STUDY.yml ... [--db DB ...] [--out DIR]`: the studies' current
    results side by side (lookahead.pages.compare); a stale or missing study is one line."""
    from lookahead.pages.compare import COMPARE_DIR, compare

    p = argparse.ArgumentParser(prog="lookahead compare", description=COMPARE_HELP)
    p.add_argument("studies", nargs="*", metavar="STUDY.yml", help="study files (each names its database)")
    p.add_argument(
        "--db",
        action="append",
        default=[],
        metavar="DB",
        help="a study database (the study is the one its build recorded); repeatable",
    )
    p.add_argument("--out", default=None, metavar="DIR", help=f"output folder (default {COMPARE_DIR})")
    args = p.parse_args(argv)
    studies = [str(Path(s).resolve()) for s in args.studies]
    dbs = [str(Path(d).resolve()) for d in args.db]
    out = Path(args.out).resolve() if args.out else PROJECT_ROOT / COMPARE_DIR
    os.chdir(PROJECT_ROOT)
    md, page = compare(studies, dbs, out)  # a stale study or a planted journal in --out: one line (UserError)
    for label, path in (("Comparison", md), ("Page", page)):
        print(f"{label}: {path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path}")
    return 0


COMPARE_HELP = "compare studies side by side: results/compare/COMPARE.md and index.html"


def _claims_check_main(argv: list[str]) -> int:
    from lookahead.claims.check import main as check_main

    return check_main(argv, prog="lookahead claims check")


def _demo_cutoff_check_main(argv: list[str]) -> int:
    from lookahead.demo.cutoff_check import main as cutoff_main

    return cutoff_main(argv, prog="lookahead demo cutoff-check")


#: The commands that come in groups, each with arguments of its own (not one --study):
#: group -> command -> (help, its entry point on the arguments after it). `make demo`
#: checks the demo's figures against the truth it planted with these.
GROUPS: dict[str, dict[str, tuple[str, Callable[[list[str]], int]]]] = {
    "claims": {
        "check": (
            "the claim-level demo's figures against its planted truth (OLR, Shapley-DCLR, efficiency); exit 1 when off",
            _claims_check_main,
        ),
    },
    "demo": {
        "cutoff-check": (
            "the demo studies' effective training cutoffs against the month the demo models' data end; exit 1 when off",
            _demo_cutoff_check_main,
        ),
    },
}


def group_main(group: str, argv: list[str]) -> int:
    """`lookahead <group> <command> ...`: the command's own arguments go to its entry point."""
    commands = GROUPS[group]
    p = argparse.ArgumentParser(prog=f"lookahead {group}")
    sub = p.add_subparsers(dest="name", required=True)
    for name, (help_, _) in commands.items():
        sub.add_parser(name, help=help_, add_help=False)
    name = p.parse_args(argv[:1]).name  # --help, or no command: argparse's usage
    return commands[name][1](argv[1:])


INIT_HELP = "write a study file by asking the protocol's intake questions (--claims: a claim-only study's), then check it"


def init_main(argv: list[str]) -> int:
    """`lookahead init`: the protocol's intake questions (lookahead.init), on stdin or as
    flags, then `lookahead check` on the study file written."""
    from lookahead import init

    p = argparse.ArgumentParser(prog="lookahead init", description=init.__doc__.splitlines()[0])
    init.add_arguments(p)
    args = p.parse_args(argv)
    out = init.init(args)
    if args.no_check:
        return 0
    os.chdir(PROJECT_ROOT)
    print(f"lookahead check --study {out}")
    study = load_study(str(out))
    return STUDY_KINDS[study.output.study_kind].check(study, str(out), None)


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compare"]:  # its own arguments: several studies, not one --study
        return compare_main(argv[1:])
    if argv[:1] == ["init"]:  # its own arguments: the intake answers, not --study
        return init_main(argv[1:])
    if argv[:1] and argv[0] in GROUPS:  # `lookahead claims check ...`: each its own arguments
        return group_main(argv[0], argv[1:])
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.study:  # a study file is relative to where you are; paths inside it to the project
        args.study = str(Path(args.study).resolve())
    if args.model or args.backend or args.base_url or args.training_cutoff:
        from lookahead.model_switch import switched_study

        if not args.model:
            print("error: --backend, --base-url and --training-cutoff go with --model", file=sys.stderr)
            return 2
        args.study = str(switched_study(args.study, args.model, args.backend, args.base_url, args.training_cutoff))
        print(f"--model {args.model}: study file {args.study}")
    os.chdir(PROJECT_ROOT)
    overrides = {}
    if args.subsample is not None:
        overrides = {"subsample_rows": args.subsample, "subsample_seed": args.seed or 0}
    if args.accept_low_parse_rate:
        overrides["accept_low_parse_rate"] = True
    study = load_study(args.study, overrides=overrides)  # the one read of the study file
    from lookahead.artefacts import check_output_folders

    check_output_folders(study)
    # the resolved settings, written once: every job and dbt get this file (not the study
    # file and the overrides as flags), so each sees the same settings
    with resolved_settings(study) as settings:
        return _command(args, extra, study, settings)


def _command(args: argparse.Namespace, extra: list[str], study: Study, settings: Path) -> int:
    """The command on the study loaded once (``settings``: its resolved settings file)."""
    kind = STUDY_KINDS[study.output.study_kind]  # a protocol study, or a claim-only one
    if args.command == "check":
        return kind.check(study, args.study, settings)
    if args.command == "run" and "--only" in extra:  # a run's build and report read every job's lines
        print("error: --only goes with `lookahead jobs` (one job alone), not `lookahead run`", file=sys.stderr)
        return 2
    if args.command in ("jobs", "run"):
        refused = refusals_first(study, kind)  # check's refusals stop a run before any query
        if refused:
            return refused
        python = job_python(study, args.yes)  # a backend with an environment of its own (vLLM) runs its jobs there
        # the protocol's jobs (a protocol study) and the claim jobs (a study with claim
        # settings), planned together: one cost table, one question (llm_jobs.run_all)
        only = [arg for name in getattr(args, "only", []) for arg in ("--only", name)]
        rc = run_jobs(settings, args.study, args.yes, [*only, *extra], python=python)
        if rc or args.command == "jobs":
            return rc
    build = args.command in ("build", "run")
    if build:
        from lookahead.identity import held_by

        held = held_by(study.database)
        if held:  # one line here, not DuckDB's lock error once per dbt thread
            print(f"error: {held}", file=sys.stderr)
            return 2
    if args.command == "run" and not args.rebuild and kind.reuse_up_to_date_build:  # `lookahead build` always builds
        from lookahead.identity import build_up_to_date

        up_to_date, why = build_up_to_date(study, " ".join(run_build_args(study)))
        build = up_to_date is None
        print(
            f"build up to date: dbt invocation {up_to_date} of study '{study.name}' (settings, "
            "input files and code unchanged; --rebuild forces dbt build)"
            if up_to_date
            else f"dbt build: {why}"
        )
    if build:
        from lookahead.artefacts import retire_study
        from lookahead.collision import database_collision, file_source
        from lookahead.identity import held_by

        held = held_by(study.database, write=True)  # also a read-only holder blocks a build
        if held:
            print(f"error: {held}", file=sys.stderr)
            return 2
        # another study's results in this database: stopped before anything of theirs is
        # retired or marked (dbt's run-start check would stop the build, but only after this)
        collision = "" if args.rebuild else database_collision(study, file_source(args.study))
        if collision:
            print(f"error: {collision}", file=sys.stderr)
            return 2
        # the build replaces the results: a build that does not finish leaves none that read as its own
        retire_study(study, "a new dbt build was started after they were written")
        rebuild = ["--full-refresh"] if args.rebuild else []
        started = time.time()
        rc = run_dbt(["build", *run_build_args(study), *rebuild], args.study, settings=settings)
        if 0 < rc < 128:  # a killed dbt has said so in its own line
            say_build_failed(study.database, since=started)
        if rc:
            from lookahead.identity import mark_stale

            # a build that failed after its status was written (its last checkpoint) is not complete
            mark_stale(study.database, f"the dbt build that wrote it failed (exit {rc})")
            return rc
    if args.command in ("report", "run"):
        return kind.report(study)
    return 0


def say_build_failed(database: Path, since: float) -> None:
    """After a dbt build that failed: one line that says so, then each column rule a failed
    `column_rules` test found broken, with its model, column and rows (dbt's own lines name
    only the test: lookahead.children.failed_column_rules)."""
    print("error: dbt build failed (see the messages above); no report written", file=sys.stderr)
    for line in failed_column_rules(database, since=since):
        print(f"  {line}", file=sys.stderr)


def refusals_first(study: Study, kind: StudyKind) -> int:
    """What `lookahead check` refuses, refused by `jobs` and `run` too, before any model
    is asked: each refusal in check's words, and the check's exit code (EXIT_REFUSED);
    warnings are printed and the run goes on. 0 when nothing is refused. The refusal is
    check's one line, word for word.

    Why: a run started without a check (or after the data changed) paid for every query
    of a study the check would have refused, a third of its rows rejected for ambiguous
    dates, say; the run's own preflight tested the prompts and labels, not the study."""
    from lookahead.check_rules import EXIT_REFUSED, REFUSE

    findings = sorted(kind.findings(study), key=lambda f: f.level != REFUSE)
    for finding in findings:
        print(f"{finding.level}: {finding.line}", file=sys.stderr)
    if any(f.level == REFUSE for f in findings):
        return EXIT_REFUSED
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
