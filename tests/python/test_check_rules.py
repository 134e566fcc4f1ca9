"""`lookahead check` judges the study (lookahead.check_rules): a file with too many rows
rejected is refused in one line naming the setting that fixes it; a sample with no
post-cutoff row, too few effective clusters, or recall labels under which LAP cannot
vary is a warning; the exit codes tell refused (2), warned (5) and clean (0) apart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml
from dbt_runner import ROOT

LOOKAHEAD = str(Path(sys.executable).with_name("lookahead"))


def demo_rows() -> pd.DataFrame:
    return pd.read_csv(ROOT / "demo" / "data" / "observations.csv", dtype=str)


def write_study(tmp_path: Path, rows: pd.DataFrame, **settings) -> Path:
    data = tmp_path / "data.csv"
    rows.to_csv(data, index=False)
    study = yaml.safe_load((ROOT / "demo" / "studies" / "clean.yml").read_text())
    study.update(study_name="judged", data_path=str(data), raw_dir=str(tmp_path / "raw"), **settings)
    path = tmp_path / "study.yml"
    path.write_text(yaml.safe_dump(study))
    return path


def findings(study_file: Path) -> list[tuple[str, str]]:
    from lookahead.check_rules import judge
    from lookahead.config import load_study
    from lookahead.rows import scan_study_rows

    study = load_study(str(study_file))
    return [(f.level, f.line) for f in judge(study, scan_study_rows(study))]


def mixed_dates(rows: pd.DataFrame, every: int) -> pd.DataFrame:
    """Every ``every``-th row whose day is 12 or less with its text_date written day/month
    (ambiguous): every=1 is about 40% of the demo's rows, every=4 about 10%."""
    out = rows.copy()
    d = pd.to_datetime(out["text_date"])
    early = (d.dt.day <= 12).to_numpy()
    pick = early & (early.cumsum() % every == 0)
    out.loc[pick, "text_date"] = d[pick].dt.strftime("%d/%m/%Y")
    return out


def test_the_mixed_date_file_is_refused_in_one_line_naming_date_format(tmp_path: Path) -> None:
    study = write_study(tmp_path, mixed_dates(demo_rows(), 1))
    proc = subprocess.run([LOOKAHEAD, "check", "--study", str(study)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("refused: ") and "above check_refuse_rejected_share 0.2" in lines[0]
    assert "top reason 'ambiguous text_date'" in lines[0] and "set date_format" in lines[0]
    assert "preflight" not in proc.stdout  # refused before the preflight loads the model


def test_a_few_rejected_rows_warn_and_the_threshold_is_a_setting(tmp_path: Path) -> None:
    rows = mixed_dates(demo_rows(), 4)
    found = findings(write_study(tmp_path, rows))
    assert [level for level, _ in found] == ["warning"]
    assert "above check_warn_rejected_share 0.05" in found[0][1] and "date_format" in found[0][1]
    assert findings(write_study(tmp_path, rows, check_warn_rejected_share=0.5)) == []
    assert findings(write_study(tmp_path, rows, date_format="%d/%m/%Y")) == []  # the fix it names


def test_no_post_cutoff_row_few_clusters_and_no_unknown_label_warn(tmp_path: Path) -> None:
    rows = demo_rows()
    few = rows[rows["entity_id"].isin(sorted(set(rows["entity_id"]))[:5])]
    template = yaml.safe_load((ROOT / "demo" / "studies" / "clean.yml").read_text())["recall_template"]
    forced = template.replace(' If you do not recall, answer "unknown".', "").replace(", or unknown", "")
    found = findings(write_study(tmp_path, few, training_cutoff="2030-12-31", recall_template=forced))
    lines = [line for _, line in found]
    assert [level for level, _ in found] == ["warning"] * 3, lines
    assert lines[0].startswith("no post-cutoff row")
    assert "5 clusters (cluster: entity)" in lines[1] and "check_min_effective_clusters 10" in lines[1]
    assert "never offers the unknown label 'unknown'" in lines[2]
    assert findings(write_study(tmp_path, rows)) == []  # the demo study itself is clean


def test_forecast_labels_the_prompt_never_names_warn(tmp_path: Path) -> None:
    found = findings(write_study(tmp_path, demo_rows(), forecast_labels={"bullish": 1, "down": -1}))
    assert found == [
        (
            "warning",
            "forecast_prompt never names the forecast label(s) 'bullish' (forecast_labels): "
            "answers that match no label are unparsed; ask for the labels in the prompt, "
            "or map the words it asks for",
        )
    ]


def test_a_warned_check_exits_5(tmp_path: Path) -> None:
    rows = demo_rows()
    few = rows[rows["entity_id"].isin(sorted(set(rows["entity_id"]))[:6])]
    proc = subprocess.run(
        [LOOKAHEAD, "check", "--study", str(write_study(tmp_path, few))], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "preflight passed" in proc.stdout and "warning: the pre-cutoff rows form 6 clusters" in proc.stderr


def test_run_refuses_where_check_refuses_before_any_query(tmp_path: Path) -> None:
    """`lookahead run` (and `jobs`) apply check's refusals: the mixed-date file stops with
    check's one line, word for word, and a non-zero exit, before the jobs start (no raw
    file, no model loaded)."""
    study = write_study(tmp_path, mixed_dates(demo_rows(), 1))
    check = subprocess.run([LOOKAHEAD, "check", "--study", str(study)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    [refusal] = check.stderr.strip().splitlines()
    for command in ("run", "jobs"):
        proc = subprocess.run(
            [LOOKAHEAD, command, "--study", str(study), "--yes"], cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == check.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [refusal], proc.stderr
        assert not (tmp_path / "raw").exists() and "forecast" not in proc.stdout


def test_run_prints_check_warnings_and_goes_on(tmp_path: Path) -> None:
    """A warning does not stop a run: it is printed, in check's words, before the jobs'
    plan (here the jobs are stopped at their question: no terminal, no --yes)."""
    rows = demo_rows()
    few = rows[rows["entity_id"].isin(sorted(set(rows["entity_id"]))[:6])]
    study = write_study(tmp_path, few)
    proc = subprocess.run(
        [LOOKAHEAD, "jobs", "--study", str(study)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    err = proc.stderr.strip().splitlines()
    assert err[0].startswith("warning: the pre-cutoff rows form 6 clusters"), proc.stderr
    assert "== the whole run ==" in proc.stdout  # the jobs went on to plan the run
    assert proc.returncode != 0 and "rerun with --yes" in proc.stderr  # and asked (no terminal here)
