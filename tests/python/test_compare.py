"""`lookahead compare`: one row per study read from its database, the figures overlaid,
and a study that is not current refused in one line (as `lookahead report` refuses it).

One real dbt build (the synthetic fixture study) serves the database path; two generated
studies (study_grid.py) serve the side-by-side rendering."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from dbt_runner import result_status
from report_checker import sig_equal, tables
from study_grid import grid, panels, render_study

from lookahead.config import Study, resolve
from lookahead.identity import COMPLETE
from lookahead.pages.compare import CompareError, StudyResult, comparison_frame, load, write_compare
from lookahead.pages.data import accuracy_by_lap_decile, lap_by_month

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(fixture_build):
    """The default fixture study's build, shared with other files (tests/conftest.py)."""
    fixture_build.check_unchanged()
    return fixture_build.study, fixture_build.result.db


def _generated(name: str, root: Path) -> StudyResult:
    spec = next(s for s in grid() if s.name == name)
    d = root / name
    render_study(spec, d)
    pre, post = panels(spec)
    study = Study.from_json(str(pd.read_csv(d / "study_settings.csv")["settings_json"].iloc[0]))
    return StudyResult(
        study,
        d / "none.duckdb",
        pd.read_csv(d / "verdict.csv").iloc[0],
        pd.read_csv(d / "lap_distribution.csv"),
        pd.DataFrame(),
        lap_by_month(pre, post),
        accuracy_by_lap_decile(pre, post),
    )


def test_two_studies_side_by_side(tmp_path):
    results = [_generated("strong", tmp_path), _generated("none", tmp_path)]
    md_path, page = write_compare(results, tmp_path / "results" / "compare")
    text = md_path.read_text()
    rows = next(t for t in tables(text) if t and "verdict" in t[0])
    assert [r["study"] for r in rows] == ["strong", "none"]
    for r, res in zip(rows, results, strict=False):
        v = res.verdict
        assert r["verdict"] == v["verdict"]
        est, t = re.match(r"(\S+) \(t (\S+)\)$", r["beta_3 (t)"]).groups()
        assert sig_equal(est, repr(float(v["beta3"]))) and sig_equal(t, repr(float(v["beta3_t"])))
        assert r["N pre / post"] == f"{int(v['n_obs_pre'])} / {int(v['n_obs_post'])}"
    # the key columns first, and no column per measure in the study table (it must fit a screen)
    assert list(rows[0])[:5] == ["study", "verdict", "beta_3 (t)", "p the rule read", "placebo"]
    assert not any(k.startswith("mean LAP") for k in rows[0])
    # the mean LAP per measure: one row per study and measure, the verdict's measure marked
    laps = next(t for t in tables(text) if t and "measure" in t[0])
    for res in results:
        mine = [r for r in laps if r["study"] == res.study.name]
        marked = [r for r in mine if r["verdict reads it"] == "yes"]
        assert len(marked) == 1 and marked[0]["measure"].startswith("recall LAP")
        lap = res.lap.set_index("sample")["mean"]
        assert sig_equal(marked[0]["mean LAP pre"], repr(float(lap["pre"])))
        assert sig_equal(marked[0]["mean LAP post"], repr(float(lap["post"])))
    # comparison.csv keeps every column
    full = pd.read_csv(tmp_path / "results" / "compare" / "comparison.csv")
    assert "mean LAP recall pre / post" in full.columns
    assert (tmp_path / "results" / "compare" / "comparison.csv").exists()
    html = page.read_text()
    specs = re.findall(r'data-chart="chart-([a-z_]+)">(.*?)</script>', html, re.S)
    assert {n for n, _ in specs} == {"lap_by_month", "accuracy_by_lap_decile"}
    for _, spec in specs:
        values = json.loads(spec)
        studies = {
            row.get("study")
            for layer in values.get("layer", [values])
            for row in (layer.get("data", {}).get("values") or values.get("data", {}).get("values") or [])
        }
        assert {"strong (generated)", "none (generated)"} <= studies
        # legends never cut a study's name; pre and post are told apart by marker too
        enc = next(layer["encoding"] for layer in values.get("layer", [values]) if "shape" in layer.get("encoding", {}))
        assert enc["color"]["legend"]["labelLimit"] == 0 and enc["shape"]["field"] == "sample"
    assert not re.search(r'(?:src|href)="(?:https?:)?//', html)
    # the glossary, linked from the folder the comparison is written to
    from urllib.parse import unquote

    from lookahead.pages.sections import GLOSSARY

    href = re.search(r"\[glossary\]\(([^)\s]+)\)", text).group(1)
    assert (tmp_path / "results" / "compare" / unquote(href)).resolve() == GLOSSARY.resolve()
    assert f'<a href="{href}">glossary</a>' in html


def test_a_built_study_by_database_and_a_stale_one_refused(built, tmp_path):
    study, shared = built
    db = tmp_path / "db.duckdb"  # the verdict row is marked stale, then complete: on a copy
    shutil.copy(shared, db)
    here = Study(vars=resolve(study.vars))
    r = load(db, here)
    assert r.verdict["verdict"] and r.study.name == "fixture"
    by_db = load(db)  # the study the build recorded
    assert by_db.study.settings_hash == here.settings_hash
    frame = comparison_frame([r])
    assert frame["verdict"].iloc[0] == r.verdict["verdict"]
    # the data file edited after the build: the result is stale and is not compared
    data = Path(study.vars["data_path"])
    original = data.read_bytes()
    try:
        data.write_bytes(original + b"\n")
        with pytest.raises(CompareError, match=r"study 'fixture' .*changed since dbt build.*not compared"):
            load(db, here)
        assert result_status(db).startswith("stale: ") and "the input file" in result_status(db)
        lookahead = Path(sys.executable).with_name("lookahead")
        proc = subprocess.run(
            [str(lookahead), "compare", "--db", str(db), "--out", str(tmp_path / "cmp")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "not compared" in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "cmp" / "COMPARE.md").exists()
    finally:
        data.write_bytes(original)
    load(db, here)  # current again: compare says so in the verdict row too
    assert result_status(db) == COMPLETE
    with pytest.raises(CompareError, match="not found"):
        load(tmp_path / "missing.duckdb")
