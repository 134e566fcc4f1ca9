"""Planted-fault experiment (issue 22, "current means current"): after a passing build and
report of the synthetic fixture study, plant one fault at a time (a setting, an input
row, a raw line, a code edit in models/, python models, the package, suites, macros,
seeds; a first build killed right after `verdict` is created; a later build killed
after or before it), run `lookahead report` as a user would, and look where a result
can be read: the report's exit, results/REPORT.md, and `select verdict, result_status
from verdict` (a SQL user's query).

A fault counts as "stale presented" when any of these still shows a verdict as current:
the report exits 0, REPORT.md is in the results folder, or the verdict row reads
"complete". Every case must also end in one `error:` line, non-zero, no traceback.

Round 2 (issue 35) adds: every artefact type counts as presented (REPORT.md, CSVs,
tables/, figures/, do-file, .dta panels), and a user's own file in each folder must
survive every case; the plain-dbt path (an edit, then `dbt build --vars`), a library bump
(a newer wildboottest ahead on the path), a database held read-write by another process,
and, against the loopback OpenAI server: a positive log-prob in replies, a line whose key
and row_id were both rewritten, a last line without its newline, and two studies sharing
one raw_dir at the same time. A job case counts a bad answer cached (a line with a
log-prob above the tolerance, or an answer the build uses for a row it was not asked
for) and a block (a study that cannot finish in one more invocation).

Run: ``python benchmarks/planted_faults.py`` (about 15 minutes on 2 cores; edits files of
this checkout one at a time and restores each; writes benchmarks/results/planted_faults.json);
``--round-two`` runs only issue 35's cases (planted_faults_round2.json); ``--case NAME``
runs one job case (JOB_CASES, e.g. ``--case "two studies"``) and only prints it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "python"), str(ROOT)]

from fixture_study import write_fixture_study  # noqa: E402

from lookahead.config import SCHEMA  # noqa: E402


def env(db: Path) -> dict[str, str]:
    e = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        LOOKAHEAD_DUCKDB=str(db),
        HF_HUB_OFFLINE="1",
        DBT_PROFILES_DIR=str(ROOT / "profiles"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
        GX_ANALYTICS_ENABLED="False",
    )
    e.pop("LOOKAHEAD_DEBUG", None)
    return e


def lookahead(args: list[str], study: Path, db: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lookahead.cli", *args, "--study", str(study)],
        cwd=ROOT,
        env={**env(db), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )


def killed_build(study: Path, db: Path, after: str | None) -> str:
    """`lookahead build`, killed (its whole process group, dbt included) when dbt reports
    the model ``after`` built (None: at its first model)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "lookahead.cli", "build", "--study", str(study)],
        cwd=ROOT,
        env=env(db),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen = ""
    for line in proc.stdout:
        if (after is None and " OK created " in line) or (after and f"model main.{after} " in line and " OK " in line):
            seen = line.strip()
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    return seen


USER_FILES = ("results/user_data.csv", "results/tables/mine.tex", "results/figures/mine.png", "outputs/my_panel.dta")


def plant_user_files(work: Path) -> None:
    for rel in USER_FILES:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text("mine")


def presented(work: Path) -> list[str]:
    """The tool's report files a reader finds now in the results and outputs folders
    (stale folders, hidden files and the user's own files left out)."""
    out = []
    for folder in ("results", "outputs"):
        root = work / folder
        if not root.is_dir():
            continue
        for p in root.rglob("*"):
            rel = p.relative_to(root)
            if p.is_file() and not rel.parts[0].startswith(("stale", ".")) and f"{folder}/{rel.as_posix()}" not in USER_FILES:
                out.append(f"{folder}/{rel.as_posix()}")
    return sorted(out)


def user_files_intact(work: Path) -> bool:
    return all((work / rel).is_file() and (work / rel).read_text() == "mine" for rel in USER_FILES)


def observe(study_file: Path, db: Path, results: Path, extra_env: dict[str, str] | None = None) -> dict:
    rep = lookahead(["report"], study_file, db, extra_env)
    errors = [x for x in rep.stderr.splitlines() if x.startswith("error:")]
    status = verdict = None
    if db.exists():
        try:
            con = duckdb.connect(str(db), read_only=True)
        except duckdb.IOException:  # held by another process: a SQL user cannot read it either
            con = None
        try:
            tables = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()} if con else set()
            if "verdict" in tables:
                verdict, status = con.sql("select verdict, result_status from verdict").fetchone()
        finally:
            if con:
                con.close()
    shown = presented(results.parent)
    presented_now = {
        "report_exit_0": rep.returncode == 0,
        "REPORT.md_in_results": (results / "REPORT.md").exists(),
        "artefacts_presented": bool(shown),
        "sql_verdict_complete": bool(status and str(status).startswith("complete")),
    }
    return {
        "exit": rep.returncode,
        "error_lines": len(errors),
        "line": errors[0] if errors else rep.stderr[-300:],
        "traceback": "Traceback" in rep.stdout + rep.stderr,
        "sql_verdict": verdict,
        "sql_result_status": (status or "")[:60],
        **presented_now,
        "presented_files": shown[:5],
        "user_files_intact": user_files_intact(results.parent),
        "stale_presented": any(presented_now.values()),
        "one_line_nonzero": rep.returncode != 0 and len(errors) == 1 and "Traceback" not in rep.stderr,
    }


def plain_dbt_build(vars_: dict, db: Path) -> subprocess.CompletedProcess:
    """`dbt build --vars <study>` as the README's step-by-step path runs it (no lookahead)."""
    dbt = Path(sys.executable).with_name("dbt")
    e = {**env(db), "DBT_TARGET_PATH": str(db.parent / "target"), "DBT_LOG_PATH": str(db.parent / "logs")}
    return subprocess.run(
        [str(dbt), "build", "--vars", json.dumps(vars_), "--project-dir", str(ROOT)],
        cwd=ROOT,
        env=e,
        capture_output=True,
        text=True,
        timeout=900,
    )


def round_two_report_cases(
    restore: Callable[[], None], study_file: Path, db: Path, results: Path, vars_: dict, data: Path, work: Path
) -> list[dict]:
    """Issue 35's report-side cases: the plain-dbt path, a library bump, a held database."""
    rows = []
    # the plain-dbt path: an edited outcome, then `dbt build --vars`; before any report the
    # old report must be gone (its numbers are no longer the database's)
    restore()
    path = data
    path.write_text(path.read_text().replace("2021-01-05,0.", "2021-01-05,1.", 1))
    built = plain_dbt_build(vars_, db)
    shown = presented(work)
    after = lookahead(["report"], study_file, db)
    rows.append(
        {
            "kind": "plain dbt path",
            "fault": "an outcome edited, then dbt build --vars (no lookahead)",
            "dbt_exit": built.returncode,
            "presented_after_build": shown[:5],
            "report_after_build_exit": after.returncode,
            "traceback": "Traceback" in after.stderr,
            "user_files_intact": user_files_intact(work),
            "stale_presented": bool(shown),
            "one_line_nonzero": built.returncode == 0 and after.returncode == 0,
        }
    )
    print(json.dumps(rows[-1]), flush=True)

    # a library bump: a newer wildboottest (then formulaic, which no project file imports)
    # installed ahead of the current one
    for name in ("wildboottest", "formulaic"):
        restore()
        site = work / f"site-{name}"
        info = site / f"{name}-99.0.0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 99.0.0\n")
        extra = {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
        rows.append(
            {"kind": "library bump", "fault": f"{name} 99.0.0 ahead on the path", **observe(study_file, db, results, extra)}
        )
        print(json.dumps(rows[-1]), flush=True)

    # a database held read-write by another process (a duckdb shell, a notebook)
    restore()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time\ncon = duckdb.connect({str(db)!r})\nprint('held', flush=True)\ntime.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        row = observe(study_file, db, results)
        build = lookahead(["build"], study_file, db)
        row["build_lines"] = [x for x in build.stderr.splitlines() if x.strip()]
        row["build_one_line_with_pid"] = (
            build.returncode != 0 and len(row["build_lines"]) == 1 and f"PID {holder.pid}" in build.stderr
        )
        row["names_pid"] = f"PID {holder.pid}" in row["line"]
    finally:
        holder.kill()
        holder.wait()
    rows.append({"kind": "held database", "fault": "held read-write by another process", **row})
    print(json.dumps(rows[-1]), flush=True)
    return rows


JOB_CASES = ("positive log-prob", "rewritten key", "no newline", "two studies", "two studies, one killed")


def job_cases(work: Path, only: str | None = None) -> list[dict]:
    """Issue 35's cache cases against the loopback OpenAI server (tests/python/
    test_openai_backend.py): each job run in its own
    process, as `lookahead jobs --only forecast` runs it (`python -m llm_jobs.run_all --only forecast`).
    ``only``: run just the case of JOB_CASES of that name (``--case``)."""
    import math
    import threading
    from http.server import ThreadingHTTPServer

    from test_openai_backend import FakeOpenAIState, _handler, write_openai_study

    from lookahead.cache.lookup import ident_of, load_cache
    from lookahead.tasks import LOGPROB_TOLERANCE

    work.mkdir(parents=True, exist_ok=True)
    servers = []

    def server(**kw: object) -> tuple[str, FakeOpenAIState]:
        state = FakeOpenAIState(**kw)  # type: ignore[arg-type]
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1", state

    def job(study: Path) -> subprocess.CompletedProcess:
        e = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
        return subprocess.run(
            [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes"],
            cwd=ROOT,
            env=e,
            capture_output=True,
            text=True,
            timeout=600,
        )

    def lines(raw: Path) -> list[dict]:
        return [json.loads(x) for f in sorted(raw.glob("**/forecast.jsonl")) for x in f.read_text().splitlines() if x.strip()]

    def bad_logprobs(recs: list[dict]) -> int:
        return sum(
            any(
                isinstance(t.get("logprob"), (int, float))
                and (not math.isfinite(t["logprob"]) or t["logprob"] > LOGPROB_TOLERANCE)
                for t in (r.get("top_logprobs") or [])
            )
            for r in recs
        )

    out: list[dict] = []

    def record(case: dict) -> None:
        out.append(case)
        print(json.dumps(case), flush=True)

    def edited_rerun(name: str, edit: Callable[[Path], None]) -> tuple[subprocess.CompletedProcess, int]:
        """A 12-row study asked once; `edit` changes its raw file; the rerun, and how many
        queries it asked."""
        url, state = server()
        study = write_openai_study(work, url, name, 12, tokenizer_path=None, model_path=None)
        job(study)
        edit(work / name / "raw" / "forecast.jsonl")
        before = state.requests
        rerun = job(study)
        return rerun, state.requests - before

    try:
        if only in (None, "positive log-prob"):
            # a positive log-prob (+2.5) in 1 of 4 replies, then once more in every reply of a rerun
            url, state = server(script=["positive_logprob", None, None, None] * 6)
            study = write_openai_study(work, url, "positive", 24, tokenizer_path=None, model_path=None)
            first = job(study)
            recs = lines(work / "positive" / "raw")
            again = job(study)
            record(
                {
                    "case": "positive log-prob +2.5 in 1 of 4 replies",
                    "exit": first.returncode,
                    "lines": len(recs),
                    "bad_answers_cached": bad_logprobs(recs),
                    "retries_said": "retries" in first.stdout + first.stderr,
                    "blocked": not (first.returncode == 0 or again.returncode == 0)
                    or len(lines(work / "positive" / "raw")) != 24,
                }
            )

        if only in (None, "rewritten key"):
            # a line whose key and row_id were both rewritten to another row's
            forged: dict = {}
            victim: dict = {}

            def forge(raw: Path) -> None:
                recs = lines(raw.parent)
                victim.update(next(r for r in recs if r["row_id"] == "r9"))
                forged.update(next(r for r in recs if r["row_id"] == "r0"), key=victim["key"], row_id="r9")
                raw.write_text("".join(json.dumps(r) + "\n" for r in [forged, *[r for r in recs if r["row_id"] != "r9"]]))

            rerun, asked_again = edited_rerun("rewritten", forge)
            # the answer read for r9's key, as the jobs and the build read it: the first
            # written of the lines that agree with the key, their fields hashing to it
            # (lookahead.cache.lookup.load_cache; staging's fields_match)
            used = load_cache(work / "rewritten" / "raw", "forecast", {victim["key"]: ident_of(victim)})
            # bad: the answer read for r9's key is r0's (its prompt is r0's)
            bad = int(used.get(victim["key"], {}).get("prompt") == forged["prompt"] != victim["prompt"])
            record(
                {
                    "case": "a line's key and row_id rewritten to another row's",
                    "exit": rerun.returncode,
                    "asked_again": asked_again,
                    "forged_line_kept_in_file": any(
                        r["prompt"] == forged["prompt"] and r["row_id"] == "r9" for r in lines(work / "rewritten" / "raw")
                    ),
                    "bad_answers_cached": bad,
                    "blocked": rerun.returncode != 0,
                }
            )

        if only in (None, "no newline"):
            # a whole last line that lost its newline
            rerun, asked_again = edited_rerun("nonewline", lambda raw: raw.write_bytes(raw.read_bytes().rstrip(b"\n")))
            raw = work / "nonewline" / "raw" / "forecast.jsonl"
            record(
                {
                    "case": "a whole last line without its newline",
                    "exit": rerun.returncode,
                    "asked_again": asked_again,
                    "torn_files": len(list(raw.parent.glob("*.torn-*"))),
                    "bad_answers_cached": 0,
                    "blocked": rerun.returncode != 0 or asked_again != 0,
                }
            )

        if only in (None, "two studies"):
            # two studies sharing one raw_dir, at the same time
            url, state = server(delay_s=0.05)
            shared = {"raw_dir": str(work / "shared_raw")}
            one = write_openai_study(work, url, "study_one", 16, tokenizer_path=None, model_path=None, **shared)
            two = write_openai_study(work, url, "study_two", 16, tokenizer_path=None, model_path=None, **shared)
            e = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(s), "--yes"],
                    cwd=ROOT,
                    env=e,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for s in (one, two)
            ]
            results = [p.communicate(timeout=600) for p in procs]
            recs = lines(work / "shared_raw")
            keys = [r["key"] for r in recs]
            record(
                {
                    "case": "two studies on one raw_dir at the same time",
                    "exits": [p.returncode for p in procs],
                    "lines": len(recs),
                    "distinct_keys": len(set(keys)),
                    "requests": state.requests,
                    "asked_twice": state.requests - len(set(keys)),
                    "waiting_said": [next((x for x in r[0].splitlines() if "waiting for" in x), "") for r in results],
                    "stderr": [r[1].strip().splitlines()[-1:] for r in results],
                    "bad_answers_cached": 0,
                    "blocked": any(p.returncode for p in procs),
                }
            )

        if only in (None, "two studies, one killed"):
            # the study holding the shared file is killed (-9) while the other waits for its answers
            import re

            url, state = server()
            state.held = lambda prompt: int((re.search(r"item (\d+)", prompt) or [0, -1])[1]) >= 4
            shared = {"raw_dir": str(work / "killed_raw"), "backend_options": {"backoff_s": 0.01, "timeout_s": 60}}
            one = write_openai_study(work, url, "killed_one", 16, tokenizer_path=None, model_path=None, **shared)
            two = write_openai_study(work, url, "killed_two", 16, tokenizer_path=None, model_path=None, **shared)
            e = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
            logs = {s: work / f"{s.stem}.out" for s in (one, two)}

            def start(s: Path) -> subprocess.Popen:
                return subprocess.Popen(
                    [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(s), "--yes"],
                    cwd=ROOT,
                    env={**e, "LOOKAHEAD_QUERY_LOG": str(work / f"{s.stem}.log")},
                    stdout=open(logs[s], "w"),
                    stderr=subprocess.STDOUT,
                )

            def until(cond: Callable[[], bool]) -> None:
                deadline = time.monotonic() + 120
                while not cond() and time.monotonic() < deadline:
                    time.sleep(0.05)

            first = start(one)
            until(lambda: len(lines(work / "killed_raw")) >= 4)
            second = start(two)
            until(lambda: "waiting for its answers" in logs[two].read_text())
            written = {r["key"] for r in lines(work / "killed_raw")}
            first.kill()
            first.wait()
            state.release.set()
            second.wait(timeout=600)
            recs = lines(work / "killed_raw")
            keys = [r["key"] for r in recs]
            asked = (work / "killed_two.log").read_text().split() if (work / "killed_two.log").exists() else []
            record(
                {
                    "case": "two studies on one raw_dir, the holder killed (-9) while the other waits",
                    "exit_of_the_waiter": second.returncode,
                    "written_before_the_kill": len(written),
                    "lines": len(recs),
                    "distinct_keys": len(set(keys)),
                    "asked_by_the_waiter": len(asked),
                    "asked_by_the_waiter_already_written": len(set(asked) & written),
                    "waiting_said": next((x for x in logs[two].read_text().splitlines() if "waiting for" in x), ""),
                    "bad_answers_cached": 0,
                    "blocked": second.returncode != 0 or len(set(keys)) != 16 or len(keys) != 16,
                }
            )
    finally:
        for httpd in servers:
            httpd.shutdown()
            httpd.server_close()
    return out


def main(argv: list[str] | None = None) -> int:
    """``--round-two``: only issue 35's cases (writes planted_faults_round2.json).
    ``--case NAME``: only that job case of JOB_CASES, printed, no result file written."""
    args = sys.argv[1:] if argv is None else list(argv)
    if "--case" in args:
        name = args[args.index("--case") + 1] if args.index("--case") + 1 < len(args) else ""
        if name not in JOB_CASES:
            print(f"error: --case takes one of: {', '.join(JOB_CASES)}", file=sys.stderr)
            return 2
        work = Path(tempfile.mkdtemp(prefix="planted-"))
        try:
            jobs = job_cases(work / "jobs", only=name)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0 if all(not j["blocked"] and not j["bad_answers_cached"] for j in jobs) else 1
    round_two_only = "--round-two" in args
    work = Path(tempfile.mkdtemp(prefix="planted-"))
    fx = write_fixture_study(work / "study")
    results = work / "results"
    vars_ = {**fx.vars, "results_dir": str(results), "outputs_dir": str(work / "outputs")}
    plant_user_files(work)
    study_file = work / "study.yml"
    study_file.write_text(yaml.safe_dump(vars_), encoding="utf-8")
    db = work / "db.duckdb"
    t0 = time.time()
    built = lookahead(["build"], study_file, db)
    assert built.returncode == 0, built.stdout[-3000:]
    first = lookahead(["report"], study_file, db)
    assert first.returncode == 0, first.stderr
    pristine = {
        "db": work / "pristine.duckdb",
        "results": work / "pristine-results",
        "outputs": work / "pristine-outputs",
        "study": work / "pristine-study",
    }
    shutil.copy(db, pristine["db"])
    shutil.copytree(results, pristine["results"])
    shutil.copytree(work / "outputs", pristine["outputs"])
    shutil.copytree(fx.root, pristine["study"])
    base_study_text = study_file.read_text()

    def restore() -> None:
        shutil.copy(pristine["db"], db)
        shutil.rmtree(results, ignore_errors=True)
        shutil.copytree(pristine["results"], results)
        shutil.rmtree(work / "outputs", ignore_errors=True)
        shutil.copytree(pristine["outputs"], work / "outputs")
        shutil.rmtree(fx.root)
        shutil.copytree(pristine["study"], fx.root)
        study_file.write_text(base_study_text)

    def setting(name: str, value: object) -> Callable[[], None]:
        return lambda: study_file.write_text(yaml.safe_dump({**vars_, name: value}))

    def edit(path: Path, old: str, new: str) -> Callable[[], None]:
        def go() -> None:
            text = path.read_text()
            assert old in text, (path, old)
            path.write_text(text.replace(old, new, 1))

        return go

    def code(rel: str, suffix: str) -> tuple[Callable[[], None], Path]:
        path = ROOT / rel
        return (lambda: path.write_text(path.read_text() + suffix)), path

    def raw_lines(task: str, change: Callable[[list[str]], list[str]]) -> Callable[[], None]:
        path = fx.raw_dir / f"{task}.jsonl"
        return lambda: path.write_text("".join(change(path.read_text().splitlines(keepends=True))))

    def line_other_row(lines: list[str]) -> list[str]:
        rec = json.loads(lines[0])
        rec["row_id"] = "another-row"
        return [json.dumps(rec) + "\n", *lines[1:]]

    def line_other_answer(lines: list[str]) -> list[str]:
        rec = json.loads(lines[0])
        rec["response_text"] = "down" if rec["response_text"] != "down" else "up"
        return [json.dumps(rec) + "\n", *lines[1:]]

    data = fx.data_path
    choices = [
        n
        for n, s in SCHEMA.settings.items()
        if s.type == "choice"
        and not s.operational
        and n in ("cluster", "high_lap_rule", "wild_bootstrap_weights", "lap_measure", "mink_mean", "period_frequency")
    ]
    faults: list[tuple[str, str, Callable[[], None], Path | None]] = []
    for name in choices:
        spec = SCHEMA.settings[name]
        now = vars_.get(name, spec.default)
        other = next(v for v in spec.allowed if v != now)
        faults.append(("setting", f"{name}: {now} -> {other}", setting(name, other), None))
    faults += [
        ("setting", "training_cutoff one day later", setting("training_cutoff", "2021-06-22"), None),
        ("setting", "model_id", setting("model_id", "another-model"), None),
        ("setting", "forecast_prompt", setting("forecast_prompt", vars_["forecast_prompt"] + " "), None),
        ("input rows", "a text edited", edit(data, "Entity 0 news 0", "Entity 0 news 0!"), None),
        ("input rows", "a row deleted", lambda: data.write_text("".join(data.read_text().splitlines(keepends=True)[:-1])), None),
        (
            "input rows",
            "a row appended",
            lambda: data.write_text(data.read_text() + data.read_text().splitlines(keepends=True)[1]),
            None,
        ),
        ("input rows", "an outcome changed", edit(data, "2021-01-05,0.", "2021-01-05,1."), None),
        ("input rows", "a trailing newline", lambda: data.write_text(data.read_text() + "\n"), None),
        ("raw lines", "a Min-K% line appended twice", raw_lines("mink", lambda ls: [*ls, ls[0]]), None),
        ("raw lines", "a forecast answer changed", raw_lines("forecast", line_other_answer), None),
        ("raw lines", "a recall line deleted", raw_lines("recall", lambda ls: ls[1:]), None),
        ("raw lines", "a forecast line under its key for another row", raw_lines("forecast", line_other_row), None),
        (
            "raw lines",
            "a failure line added",
            lambda: (fx.raw_dir / "recall.failures.jsonl").write_text(
                json.dumps({"key": "k", "task": "recall", "reason": "timeout"}) + "\n"
            ),
            None,
        ),
    ]
    for kind, rel in (
        ("code: models/", "models/marts/panel/panel.sql"),
        ("code: models/", "models/staging/stg_forecast_responses.sql"),
        ("code: models/", "models/intermediate/int_panel_merged.sql"),
        ("code: python models", "python_models/marts/results/verdict_py.py"),
        ("code: python models", "python_models/marts/results/regression_results_py.py"),
        ("code: package", "lookahead/stats/verdict.py"),
        ("code: package", "lookahead/rows.py"),
        ("code: suites", "expectations/panel.json"),
        ("code: macros", "macros/study_helpers.sql"),
        ("code: seeds", "seeds/reject_reasons.csv"),
        ("code: data tests", "models/marts/panel/_panel__models.yml"),
    ):
        suffix = "\n" if rel.endswith((".json", ".csv")) else ("\n-- planted\n" if rel.endswith(".sql") else "\n# planted\n")
        go, path = code(rel, suffix)
        faults.append((kind, f"{rel} edited", go, path))

    rows = []
    if not round_two_only:
        for kind, what, plant, code_path in faults:
            restore()
            saved = code_path.read_bytes() if code_path else None
            try:
                plant()
                rows.append({"kind": kind, "fault": what, **observe(study_file, db, results)})
            finally:
                if code_path and saved is not None:
                    code_path.write_bytes(saved)
            print(json.dumps(rows[-1]), flush=True)

        # killed builds: a first build (no database yet) and later builds over a passed one
        for kind, what, fresh, after, plant in (
            ("killed first build", "killed right after verdict was created", True, "verdict", None),
            ("killed first build", "killed at its first model", True, None, None),
            (
                "killed later build",
                "an outcome edited, killed right after verdict",
                False,
                "verdict",
                edit(data, "2021-01-05,0.", "2021-01-05,1."),
            ),
            (
                "failed later build",
                "a text edited (its answers not asked yet): the gate fails",
                False,
                "no-such-model",
                edit(data, "Entity 0 news 0", "Entity 0 news 0!"),
            ),
            ("killed later build", "no change, killed right after verdict", False, "verdict", None),
            (
                "killed later build",
                "raw line edited, killed at its first model",
                False,
                None,
                raw_lines("forecast", line_other_answer),
            ),
        ):
            restore()
            if fresh:
                db.unlink()
            if plant:
                plant()
            seen = killed_build(study_file, db, after)
            rows.append({"kind": kind, "fault": what, "killed_after": seen[-80:], **observe(study_file, db, results)})
            print(json.dumps(rows[-1]), flush=True)

    rows += round_two_report_cases(restore, study_file, db, results, vars_, data, work)

    # a line that disagrees with its key: the build's message names raw_line_rejects
    names_rejects = None
    if not round_two_only:
        restore()
        raw_lines("forecast", line_other_row)()
        bad = lookahead(["build"], study_file, db)
        names_rejects = bad.returncode != 0 and "raw_line_rejects" in bad.stdout + bad.stderr

    jobs = job_cases(work / "jobs")
    summary = {
        "faults": len(rows),
        "stale_presented": sum(r["stale_presented"] for r in rows),
        "user_files_lost": sum(not r["user_files_intact"] for r in rows),
        "job_cases": len(jobs),
        "bad_answers_cached": sum(j["bad_answers_cached"] for j in jobs),
        "blocks": sum(j["blocked"] for j in jobs),
        "shared_keys_asked_twice": sum(j.get("asked_twice", 0) + j.get("asked_by_the_waiter_already_written", 0) for j in jobs),
        "one_line_nonzero": sum(bool(r.get("one_line_nonzero")) for r in rows),
        "tracebacks": sum(r["traceback"] for r in rows),
        "bad_line_build_message_names_raw_line_rejects": names_rejects,
        "seconds": round(time.time() - t0),
    }
    out = ROOT / "benchmarks" / "results" / ("planted_faults_round2.json" if round_two_only else "planted_faults.json")
    out.write_text(json.dumps({"summary": summary, "cases": rows, "job_cases": jobs}, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary))
    shutil.rmtree(work, ignore_errors=True)
    ok = (
        summary["stale_presented"] == 0
        and summary["user_files_lost"] == 0
        and summary["bad_answers_cached"] == 0
        and summary["blocks"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
