"""One settings schema, one loader (lookahead/study_settings.yml, lookahead/config.py).

Every error names its setting and comes before any query; identifying settings never
fall back to the default (demo) study; dbt's vars block is generated from the schema and
checked by the same code through the DuckDB plugin."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lookahead.config import (
    PROJECT_ROOT,
    SCHEMA,
    Study,
    StudyConfigError,
    check_dbt_vars,
    default_study_path,
    load_study,
    read_study_file,
    resolve,
    study_from_dbt_vars,
    write_dbt_vars,
)

DEMO = read_study_file(default_study_path())


def _write(tmp_path: Path, study: dict, name: str = "study.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    return path


def test_every_setting_is_declared_with_a_meaning_and_a_type():
    for name, spec in SCHEMA.settings.items():
        assert spec.meaning and len(spec.meaning.splitlines()) == 1, name
        assert spec.identifies != (name in SCHEMA.defaults()), name
        if spec.type == "choice":
            assert spec.allowed and (spec.identifies or spec.default is None or spec.default in spec.allowed), name


def test_dbt_vars_and_profile_are_generated_from_the_schema():
    assert write_dbt_vars(check=True), "run python scripts/generated_files.py --write-dbt-vars"
    with open(PROJECT_ROOT / "dbt_project.yml", encoding="utf-8") as fh:
        dbt_vars = yaml.safe_load(fh)["vars"]
    assert set(dbt_vars) == {n for n, s in SCHEMA.settings.items() if s.dbt}  # what dbt reads with var()
    default = load_study().vars
    assert resolve(dbt_vars, base=default) == default  # the default study's values


@pytest.mark.parametrize(
    "drop", ["model_path", "training_cutoff", "outcome_description", "forecast_prompt", "recall_labels", "raw_dir", "column_map"]
)
def test_a_study_file_never_inherits_an_identifying_setting(tmp_path, drop):
    study = {k: v for k, v in DEMO.items() if k != drop}
    with pytest.raises(StudyConfigError, match=rf"^setting '{drop}' is missing: a study must give it"):
        load_study(_write(tmp_path, study))


def test_endpoint_replaces_model_path_for_the_openai_backend(tmp_path):
    study = {k: v for k, v in DEMO.items() if k != "model_path"}
    study.update(backend="openai")
    with pytest.raises(StudyConfigError, match="setting 'base_url' is missing"):
        load_study(_write(tmp_path, study))
    study["base_url"] = "http://127.0.0.1:8000/v1"
    assert load_study(_write(tmp_path, study)).backend.model_path is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"trainig_cutoff": "2021-12-31"}, "setting 'trainig_cutoff' is not a study setting (did you mean 'training_cutoff'?)"),
        ({"training_cutoff": 20211231}, "setting 'training_cutoff': 20211231 is not a date (write it quoted, 'YYYY-MM-DD')"),
        ({"training_cutoff": 2021}, "setting 'training_cutoff': 2021 is not a date"),
        ({"nw_lag": "abc"}, "setting 'nw_lag': 'abc' is not a whole number"),
        ({"mink_k": 0}, "setting 'mink_k': 0.0 must be greater than 0"),
        ({"cluster": "firm"}, "setting 'cluster': 'firm' is not one of entity, period, date, none"),
        ({"use_chat_template": "yes"}, "setting 'use_chat_template': 'yes' is not true or false"),
        ({"forecast_labels": {"up": "1"}}, "setting 'forecast_labels.up': '1' is not a number"),
        (
            {"column_map": {**DEMO["column_map"], "txt": "text"}},
            "setting 'column_map.txt': not a protocol column (did you mean 'text'?)",
        ),
        ({"moderator_column": "small"}, "setting 'moderator_column': 'small' must be one of extra_columns"),
    ],
)
def test_bad_settings_name_the_setting(tmp_path, change, message):
    with pytest.raises(StudyConfigError) as err:
        load_study(_write(tmp_path, {**DEMO, **change}))
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_unquoted_yaml_date_is_one_line_naming_the_fix(tmp_path):
    """README: an unquoted cutoff is an error (YAML reads it as a date object)."""
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump({**DEMO, "training_cutoff": "X"}).replace("training_cutoff: X", "training_cutoff: 2021-12-31"))
    with pytest.raises(StudyConfigError, match=r"2021-12-31 is unquoted; write it quoted, .2021-12-31."):
        load_study(path)


def test_undeclared_setting_names_are_a_bug_in_code():
    with pytest.raises(AttributeError, match="batchsize"):
        load_study().backend.batchsize  # noqa: B018 - a typed section has no such field


def test_settings_hash_ignores_where_files_go_but_not_what_is_computed():
    base = load_study()
    moved = load_study(overrides={"results_dir": "/tmp/elsewhere", "batch_size": 64})
    changed = load_study(overrides={"cluster": "date"})
    assert moved.settings_hash == base.settings_hash
    assert changed.settings_hash != base.settings_hash
    assert Study.from_json(base.settings_json()).vars == base.vars


def test_dbt_check_and_python_loader_agree():
    """dbt's run-start check is this module's code: overrides of the default study pass,
    a new study must be complete, a hand-edited dbt value is caught."""
    ours = load_study().vars
    assert check_dbt_vars(json.dumps(ours), "{}") == ""
    assert check_dbt_vars(json.dumps({**ours, "bootstrap_draws": 0}), "{bootstrap_draws: 0}") == ""
    assert study_from_dbt_vars("{bootstrap_draws: 0}").paper.bootstrap_draws == 0
    assert check_dbt_vars(json.dumps(ours), "{training_cutoff: 2023-12-31}").startswith("setting 'study_name' is missing")
    assert "regenerate dbt_project.yml" in check_dbt_vars(json.dumps({**ours, "mink_k": 0.3}), "{}")
    full = json.dumps(DEMO, default=str)
    assert study_from_dbt_vars(full).vars == ours


def test_dbt_check_reads_the_settings_file_the_lookahead_command_hands_dbt(tmp_path, monkeypatch):
    """Without --vars, with $LOOKAHEAD_STUDY_SETTINGS set, the check is that file's study:
    a bad setting in it is named, and dbt's vars (the default study's, not this build's)
    are not compared, so a study whose values differ from them passes."""
    from lookahead.config import STUDY_SETTINGS_ENV

    study = load_study(overrides={"mink_k": 0.3, "bootstrap_draws": 7})
    settings = tmp_path / "study.json"
    settings.write_text(json.dumps(study.vars, default=str), encoding="utf-8")
    monkeypatch.setenv(STUDY_SETTINGS_ENV, str(settings))
    default = json.dumps(load_study().vars, default=str)
    assert check_dbt_vars(default, "{}") == ""
    assert check_dbt_vars(default, "") == ""
    settings.write_text(json.dumps({**study.vars, "mink_k": 7}, default=str), encoding="utf-8")
    assert "mink_k" in check_dbt_vars(default, "{}")
    # --vars still win over the settings file, and are compared with dbt's values
    assert "regenerate dbt_project.yml" in check_dbt_vars(
        json.dumps({**load_study().vars, "mink_k": 0.3}), "{bootstrap_draws: 0}"
    )


def test_a_study_decoded_from_its_file_serves_its_recorded_settings_json():
    """Study.from_json keeps a decoded study under its text and its settings_json, so the
    dbt plugin's decode of the settings file and the models' reads of study_settings share
    one object (one decode per build: test_study_loads)."""
    study = load_study(overrides={"bootstrap_draws": 11})
    text = json.dumps(study.vars, default=str)
    decoded = Study.from_json(text)
    assert decoded.vars == study.vars
    assert Study.from_json(decoded.settings_json()) is decoded
    assert Study.from_json(text, root=Path("/elsewhere")) is not decoded  # the root is part of the key


def test_dbt_run_start_check_names_a_misspelled_setting_before_anything_runs(tmp_path):
    from dbt_runner import run_dbt

    res = run_dbt(["build"], {**DEMO, "trainig_cutoff": "2021-12-31"}, tmp_path / "db.duckdb", as_vars=True)
    assert res.returncode != 0
    assert "setting 'trainig_cutoff' is not a study setting (did you mean 'training_cutoff'?)" in res.output
    assert "Traceback" not in res.output
    assert not res.has_table("stg_observations")


def test_study_file_resolves_from_any_working_directory(tmp_path):
    """A study file is found relative to where you are; the paths inside it are relative
    to the project folder, so `lookahead report --study study.yml` works from the
    study's own folder."""
    _write(tmp_path, {**DEMO, "study_name": "cwd_test", "trainig_cutoff": "x"})
    lookahead = Path(sys.executable).with_name("lookahead")
    proc = subprocess.run([str(lookahead), "report", "--study", "study.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert re.fullmatch(
        r"error: setting 'trainig_cutoff' is not a study setting \(did you mean 'training_cutoff'\?\)\n", proc.stderr
    ), proc.stderr


def test_backends_are_the_declared_choices():
    """The factory's table and the schema's allowed values name the same backends, so the
    schema's check is the only one get_backend needs."""
    from lookahead.backends import BACKENDS
    from lookahead.config import CHOICES

    assert set(BACKENDS) == set(CHOICES["backend"])


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("csv_delimiter", ";", ";"),
        ("csv_delimiter", None, None),
        ("subsample_rows", 5, 5),
        ("subsample_rows", None, None),
        ("subsample_seed", None, 0),
    ],
)
def test_one_setting_is_checked_by_its_declared_rule(name, value, expected):
    from lookahead.config import check_setting

    assert check_setting(name, value) == expected


@pytest.mark.parametrize(
    "name, value, pattern",
    [
        ("csv_delimiter", "::", r"setting 'csv_delimiter': '::' is not one of"),
        ("subsample_rows", 0, r"setting 'subsample_rows': 0 is below its minimum 1"),
        ("subsample_seed", 1.5, r"setting 'subsample_seed': 1.5 is not a whole number"),
        ("csv_delimter", ",", r"csv_delimiter"),
    ],
)
def test_one_bad_setting_names_itself(name, value, pattern):
    from lookahead.config import check_setting

    with pytest.raises(StudyConfigError, match=pattern):
        check_setting(name, value)


def test_a_study_is_read_once_per_process_and_never_through_the_default(monkeypatch, tmp_path) -> None:
    """Loading a named study file reads that file (and its extends chain) only, never the
    default study; the settings a build recorded decode once per process and text, so the
    dbt Python models of one build share one Study (the same object, equal to a fresh
    decode)."""
    from lookahead import config

    read: list[Path] = []
    real = config.read_study_file

    def counting(path, *args, **kwargs):
        read.append(Path(path).resolve())
        return real(path, *args, **kwargs)

    monkeypatch.setattr(config, "read_study_file", counting)
    monkeypatch.delenv("LOOKAHEAD_STUDY", raising=False)
    named = PROJECT_ROOT / "demo" / "studies" / "clean.yml"
    study = config.load_study(str(named))
    assert read[0] == named.resolve() and default_study_path().resolve() not in read
    config.load_study(None)  # no file named: the default study, read once
    assert read[1:] == [default_study_path().resolve()]
    text = study.settings_json()
    first = Study.from_json(text)
    assert Study.from_json(text) is first
    assert first == Study(vars=resolve(json.loads(text)))
    other = Study.from_json(study.with_settings(nw_lag=3).settings_json())
    assert other is not first and other.protocol.nw_lag == 3 and first.protocol.nw_lag == study.protocol.nw_lag
