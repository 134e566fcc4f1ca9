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

Run: ``python benchmarks/planted_faults.py`` (about 15 minutes on 2 cores; edits files of
this checkout one at a time and restores each; writes benchmarks/results/planted_faults.json).
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
from pathlib import Path
from typing import Callable

import duckdb
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "python"), str(ROOT)]

from fixture_study import write_fixture_study  # noqa: E402

from lookahead.config import SCHEMA  # noqa: E402


def env(db: Path) -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=str(ROOT), LOOKAHEAD_DUCKDB=str(db), HF_HUB_OFFLINE="1",
             DBT_PROFILES_DIR=str(ROOT / "profiles"), DBT_SEND_ANONYMOUS_USAGE_STATS="False",
             GX_ANALYTICS_ENABLED="False")
    e.pop("LOOKAHEAD_DEBUG", None)
    return e


def lookahead(args: list[str], study: Path, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lookahead.cli", *args, "--study", str(study)], cwd=ROOT,
                          env=env(db), capture_output=True, text=True, timeout=900)


def killed_build(study: Path, db: Path, after: str | None) -> str:
    """`lookahead build`, killed (its whole process group, dbt included) when dbt reports
    the model ``after`` built (None: at its first model)."""
    proc = subprocess.Popen([sys.executable, "-m", "lookahead.cli", "build", "--study", str(study)], cwd=ROOT,
                            env=env(db), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    seen = ""
    for line in proc.stdout:
        if (after is None and " OK created " in line) or (after and f"model main.{after} " in line and " OK " in line):
            seen = line.strip()
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    return seen


def observe(study_file: Path, db: Path, results: Path) -> dict:
    rep = lookahead(["report"], study_file, db)
    errors = [x for x in rep.stderr.splitlines() if x.startswith("error:")]
    status = verdict = None
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        try:
            tables = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
            if "verdict" in tables:
                verdict, status = con.sql("select verdict, result_status from verdict").fetchone()
        finally:
            con.close()
    presented = {"report_exit_0": rep.returncode == 0, "REPORT.md_in_results": (results / "REPORT.md").exists(),
                 "sql_verdict_complete": bool(status and str(status).startswith("complete"))}
    return {"exit": rep.returncode, "error_lines": len(errors), "line": errors[0] if errors else rep.stderr[-300:],
            "traceback": "Traceback" in rep.stdout + rep.stderr, "sql_verdict": verdict,
            "sql_result_status": (status or "")[:60], **presented,
            "stale_presented": any(presented.values()),
            "one_line_nonzero": rep.returncode != 0 and len(errors) == 1 and "Traceback" not in rep.stderr}


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="planted-"))
    fx = write_fixture_study(work / "study")
    results = work / "results"
    vars_ = {**fx.vars, "results_dir": str(results)}
    study_file = work / "study.yml"
    study_file.write_text(yaml.safe_dump(vars_), encoding="utf-8")
    db = work / "db.duckdb"
    t0 = time.time()
    built = lookahead(["build"], study_file, db)
    assert built.returncode == 0, built.stdout[-3000:]
    first = lookahead(["report"], study_file, db)
    assert first.returncode == 0, first.stderr
    pristine = {"db": work / "pristine.duckdb", "results": work / "pristine-results",
                "study": work / "pristine-study"}
    shutil.copy(db, pristine["db"])
    shutil.copytree(results, pristine["results"])
    shutil.copytree(fx.root, pristine["study"])
    base_study_text = study_file.read_text()

    def restore() -> None:
        shutil.copy(pristine["db"], db)
        shutil.rmtree(results, ignore_errors=True)
        shutil.copytree(pristine["results"], results)
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
    choices = [n for n, s in SCHEMA.settings.items()
               if s.type == "choice" and not s.operational and n in ("cluster", "high_lap_rule",
                                                                      "wild_bootstrap_weights", "lap_measure",
                                                                      "mink_mean", "period_frequency")]
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
        ("input rows", "a row deleted", lambda: data.write_text("".join(
            data.read_text().splitlines(keepends=True)[:-1])), None),
        ("input rows", "a row appended", lambda: data.write_text(
            data.read_text() + data.read_text().splitlines(keepends=True)[1]), None),
        ("input rows", "an outcome changed", edit(data, "2021-01-05,0.", "2021-01-05,1."), None),
        ("input rows", "a trailing newline", lambda: data.write_text(data.read_text() + "\n"), None),
        ("raw lines", "a Min-K% line appended twice", raw_lines("mink", lambda ls: [*ls, ls[0]]), None),
        ("raw lines", "a forecast answer changed", raw_lines("forecast", line_other_answer), None),
        ("raw lines", "a recall line deleted", raw_lines("recall", lambda ls: ls[1:]), None),
        ("raw lines", "a forecast line under its key for another row", raw_lines("forecast", line_other_row),
         None),
        ("raw lines", "a failure line added", lambda: (fx.raw_dir / "recall.failures.jsonl").write_text(
            json.dumps({"key": "k", "task": "recall", "reason": "timeout"}) + "\n"), None),
    ]
    for kind, rel in (("code: models/", "models/marts/panel/panel.sql"),
                      ("code: models/", "models/staging/stg_forecast_responses.sql"),
                      ("code: models/", "models/intermediate/int_panel_merged.sql"),
                      ("code: python models", "python_models/marts/results/verdict_py.py"),
                      ("code: python models", "python_models/marts/results/regression_results_py.py"),
                      ("code: package", "lookahead/stats/verdict.py"),
                      ("code: package", "lookahead/rows.py"),
                      ("code: suites", "expectations/panel.json"),
                      ("code: macros", "macros/study_helpers.sql"),
                      ("code: seeds", "seeds/reject_reasons.csv"),
                      ("code: data tests", "models/marts/panel/_panel__models.yml")):
        suffix = "\n" if rel.endswith((".json", ".csv")) else ("\n-- planted\n" if rel.endswith(".sql")
                                                                else "\n# planted\n")
        go, path = code(rel, suffix)
        faults.append((kind, f"{rel} edited", go, path))

    rows = []
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
            ("killed later build", "an outcome edited, killed right after verdict", False, "verdict",
             edit(data, "2021-01-05,0.", "2021-01-05,1.")),
            ("failed later build", "a text edited (its answers not asked yet): the gate fails", False,
             "no-such-model", edit(data, "Entity 0 news 0", "Entity 0 news 0!")),
            ("killed later build", "no change, killed right after verdict", False, "verdict", None),
            ("killed later build", "raw line edited, killed at its first model", False, None,
             raw_lines("forecast", line_other_answer))):
        restore()
        if fresh:
            db.unlink()
        if plant:
            plant()
        seen = killed_build(study_file, db, after)
        rows.append({"kind": kind, "fault": what, "killed_after": seen[-80:], **observe(study_file, db, results)})
        print(json.dumps(rows[-1]), flush=True)

    # a line that disagrees with its key: the build's message names raw_line_rejects
    restore()
    raw_lines("forecast", line_other_row)()
    bad = lookahead(["build"], study_file, db)
    names_rejects = bad.returncode != 0 and "raw_line_rejects" in bad.stdout + bad.stderr

    summary = {
        "faults": len(rows),
        "stale_presented": sum(r["stale_presented"] for r in rows),
        "one_line_nonzero": sum(r["one_line_nonzero"] for r in rows),
        "tracebacks": sum(r["traceback"] for r in rows),
        "bad_line_build_message_names_raw_line_rejects": names_rejects,
        "seconds": round(time.time() - t0),
    }
    out = ROOT / "benchmarks" / "results" / "planted_faults.json"
    out.write_text(json.dumps({"summary": summary, "cases": rows}, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if summary["stale_presented"] == 0 and summary["one_line_nonzero"] == summary["faults"] else 1


if __name__ == "__main__":
    sys.exit(main())
