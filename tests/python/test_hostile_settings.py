"""Every study-file value is data: a hostile-value sweep over every string setting the
declaration holds, a build whose paths and column names are SQL, Jinja and shell
attacks, the Stata do-file, a prompt holding Jinja, and a lint that fails on a setting
joined to SQL text (docs/SECURITY.md).

Each value of the sweep either is refused in one line naming the setting, or is kept
exactly as written (data). The setting names come from lookahead/study_settings.yml
itself, so a new setting is swept without anyone adding it here."""

from __future__ import annotations

import io
import json
import re
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from dbt_runner import ROOT, run_dbt
from fixture_study import write_fixture_study
from test_openai_backend import server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture

from lookahead import untrusted
from lookahead.config import SCHEMA_PATH, StudyConfigError, read_study_file, resolve
from lookahead.stats.protocol import StatsSections
from lookahead.stats.stata import stata_do_file, stata_string

#: The hostile values (issue: quote, double quote, backslash, newline, NUL, Jinja, SQL,
#: shell, 10,000 characters, non-ASCII).
HOSTILE = {
    "quote": "it's",
    "double_quote": 'say "hi"',
    "backslash": "a\\b\\",
    "newline": "one\ntwo",
    "nul": "a\x00b",
    "jinja": "{{ 7*7 }}{% raise %}",
    "sql": "'; drop table verdict; --",
    "shell": "$(touch x)`touch y`",
    "long": "x" * 10_000,
    "non_ascii": "étude 研究 ü",
}
#: The declared settings, read from the declaration itself.
DECLARED: dict[str, dict[str, Any]] = yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))["settings"]
SWEPT_TYPES = ("string", "text", "path", "list", "mapping", "column_map")


def _base() -> dict[str, Any]:
    """A valid study that needs no file to resolve (the fixture study's settings)."""
    return {
        "study_name": "sweep",
        "data_path": "obs.csv",
        "raw_dir": "raw",
        "column_map": {
            c: c for c in ("row_id", "entity_id", "entity_name", "ticker", "text", "text_date", "target_date", "outcome")
        },
        "model_id": "m",
        "backend": "transformers",
        "model_path": "m",
        "training_cutoff": "2021-06-01",
        "period_frequency": "week",
        "outcome_description": "the price",
        "reference_period": "the day before",
        "forecast_prompt": "Headline: {text}\nUp or down?",
        "recall_template": "On {target_date}, did {entity_name} go up or down?",
        "forecast_labels": {"up": 1, "down": -1},
        "recall_labels": {"up": "up", "down": "down", "unknown": "unknown"},
        "use_chat_template": False,
    }


def _placed(name: str, decl: dict[str, Any], base: dict[str, Any], value: str) -> list[tuple[str, Any]]:
    """Where `value` goes in setting `name`: (label, the setting's new value) for each place."""
    t = decl["type"]
    if t in ("string", "text", "path"):
        return [(name, value)]
    if t == "list":
        return [(name, [value])]
    if t == "column_map":
        return [(f"{name}.text", {**base["column_map"], "text": value})]
    current = base.get(name) or {}
    keys = decl.get("keys") or []
    if keys:  # declared keys: the value in one of them, and as a key of its own
        return [(f"{name}.{keys[0]}", {**current, keys[0]: value}), (f"{name} key", {**current, value: value})]
    filler: Any = 1 if decl.get("values") == "number" else value
    return [(f"{name} key", {**current, value: filler}), (f"{name} value", {**current, "k": value})]


def _kept(given: Any, got: Any) -> bool:
    return got == given


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_every_string_setting_refuses_or_keeps_each_hostile_value(kind: str) -> None:
    value = HOSTILE[kind]
    base = _base()
    swept = 0
    for name, decl in DECLARED.items():
        if decl["type"] not in SWEPT_TYPES:
            continue
        for label, setting in _placed(name, decl, base, value):
            swept += 1
            study = {**base, name: setting}
            try:
                got = resolve(study)
            except StudyConfigError as err:
                message = str(err)
                assert "\n" not in message and "\x00" not in message, (label, message)
                assert re.search(rf"setting '{re.escape(name)}[.']", message), (label, message)
                continue
            assert _kept(setting, got[name]), (label, got[name])
    assert swept > 40  # every string, path, text, list and mapping setting


@pytest.mark.parametrize("kind", ["newline", "nul", "long", "quote", "double_quote", "backslash", "jinja", "sql", "shell"])
def test_a_study_name_that_is_not_one_path_segment_is_refused(kind: str) -> None:
    with pytest.raises(StudyConfigError, match=r"^setting 'study_name'"):
        resolve({**_base(), "study_name": HOSTILE[kind]})


@pytest.mark.parametrize(
    "name",
    [
        "../escape",
        "../../escape_test/x",
        "a/b",
        "a\\b",
        "..",
        ".hidden",
        "my\"study'x",
        "x" * (untrusted.MAX_NAME_CHARS + 1),
        " padded",
    ],
)
def test_study_names_that_would_leave_the_study_folders(name: str) -> None:
    with pytest.raises(StudyConfigError, match=r"^setting 'study_name'"):
        resolve({**_base(), "study_name": name})


def test_a_refused_name_opens_no_database_outside_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain `dbt build --vars` with a bad study_name: the plugin attaches a fixed database
    under outputs/ (the run-start check then stops the build), never the name's path."""
    from lookahead.config import REFUSED_STUDY_NAME, database_path, dbt_study_name

    monkeypatch.delenv("LOOKAHEAD_DUCKDB", raising=False)
    for name in ("../../escape_test/x", "a/b", 'my"study\nshell touch pwned'):
        assert dbt_study_name({"study_name": name}) == REFUSED_STUDY_NAME
    assert database_path(REFUSED_STUDY_NAME, ROOT).parent == ROOT / "outputs"


def test_names_that_are_names_pass() -> None:
    for name in ("demo", "my study 2", "étude_研究", "v1.2-final"):
        assert resolve({**_base(), "study_name": name})["study_name"] == name


def test_lookahead_check_answers_in_one_line_before_writing(tmp_path: Path) -> None:
    """`lookahead check` on each hostile study_name: one line and exit 2, or a pass; no
    file appears in the project or beside the study."""
    from lookahead.cli import main

    fixture = write_fixture_study(tmp_path / "fx", n_entities=2, n_dates=6, cutoff_index=3)
    for kind, value in HOSTILE.items():
        path = tmp_path / f"{kind}.json"  # JSON is YAML: the NUL survives the file
        path.write_text(json.dumps({**fixture.vars, "study_name": value}), encoding="utf-8")
        before = sorted(p for p in tmp_path.rglob("*"))
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(["check", "--study", str(path)])
        lines = err.getvalue().strip().splitlines()
        assert "Traceback" not in out.getvalue() + err.getvalue(), kind
        if f"study '{value}': settings OK" in out.getvalue():  # kept as written (then the preflight runs)
            assert kind == "non_ascii", kind
        else:
            assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: setting 'study_name'"), (kind, lines)
        assert sorted(p for p in tmp_path.rglob("*")) == before, kind
        assert not _named_after(value), kind


def _named_after(value: str) -> list[Path]:
    """Files or folders in the project, outputs/ or results/ whose name holds `value` (what
    a study name would make), or that an injected command would write."""
    found = []
    for folder in (ROOT, ROOT / "outputs", ROOT / "results"):
        if folder.is_dir():
            found += [p for p in folder.iterdir() if "\x00" not in value and value in p.name]
    return found + [p for p in (ROOT / "PWNED.csv", ROOT / "PWNED_DATA.csv", ROOT / "x", ROOT / "y") if p.exists()]


def test_yaml_alias_bomb_and_oversized_files_are_refused(tmp_path: Path) -> None:
    bomb = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        bomb.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 10) + "]")
    bomb.append("study_name: *i")
    path = tmp_path / "bomb.yml"
    path.write_text("\n".join(bomb) + "\n", encoding="utf-8")
    with pytest.raises(StudyConfigError, match=r"more than 100,000 values \(YAML aliases\)"):
        read_study_file(path)
    big = tmp_path / "big.yml"
    big.write_text("study_name: x\n" + "# padding\n" * 120_000, encoding="utf-8")
    with pytest.raises(StudyConfigError, match=r"bytes, more than the 1,000,000 a study file may hold"):
        read_study_file(big)
    ok = tmp_path / "ok.yml"  # a few aliases (a shared label map) are fine
    ok.write_text("labels: &l {up: up}\nother: *l\n", encoding="utf-8")
    assert read_study_file(ok) == {"labels": {"up": "up"}, "other": {"up": "up"}}


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system", "!!python/object:os.system", "!custom"])
def test_a_yaml_tag_is_named_as_unsupported_not_as_invalid_yaml(tag: str, tmp_path: Path) -> None:
    """A study file with a tag the safe loader does not build is valid YAML: the line says
    which tag, where, and that it is not supported (and nothing is run)."""
    from lookahead.config import study_from_dbt_vars

    path = tmp_path / "tagged.yml"
    path.write_text(f'study_name: x\nmodel_id: {tag} ["touch {tmp_path}/ran"]\n', encoding="utf-8")
    with pytest.raises(
        StudyConfigError,
        match=rf"study file '.*tagged.yml' uses the YAML tag '{re.escape(tag)}' "
        r"at line 2, which is not supported",
    ) as err:
        read_study_file(path)
    assert "not valid YAML" not in str(err.value) and not (tmp_path / "ran").exists()
    with pytest.raises(StudyConfigError, match=rf"--vars uses the YAML tag '{re.escape(tag)}'"):
        study_from_dbt_vars(f"{{study_name: x, model_id: {tag} [1]}}")


# ---------------------------------------------------------------- values in SQL and dbt

#: Folder names that were SQL when a path was pasted into SQL text (the attack that
#: wrote PWNED.csv), with Jinja, shell and DuckDB's file-pattern characters in them.
RAW_DIR_ATTACK = "r'); copy (select 42 as pwned) to 'PWNED.csv'; select count(*) from glob('data"
DATA_ATTACK = "d'); copy (select 7 as pwned) to 'PWNED_DATA.csv'; --"
TAIL = "x {{ 7*7 }} $(touch x) [ab]? é"
COLUMN_ATTACK = "sm\"all'); drop table verdict; -- {{ 7*7 }}"


def test_a_build_reads_hostile_paths_and_column_names_as_data(tmp_path: Path) -> None:
    """The staging and validation nodes and the run-start checks (glob, read_blob, the
    column checks) on a study whose raw_dir and data_path are SQL injections and whose
    extra column is named like one, passed as `--vars` (dbt's own parsing too): the build
    passes, the values arrive verbatim, and no file appears outside the study's folders."""
    fx = write_fixture_study(tmp_path / "fx", n_entities=4, n_dates=10, cutoff_index=6)
    raw = tmp_path / "fx" / RAW_DIR_ATTACK / TAIL
    raw.parent.mkdir(parents=True)
    shutil.move(str(fx.raw_dir), str(raw))
    data = tmp_path / "fx" / DATA_ATTACK / f"obs {TAIL}.csv"
    data.parent.mkdir(parents=True)
    import pandas as pd

    frame = pd.read_csv(fx.data_path, dtype=str)
    frame[COLUMN_ATTACK] = [str(i % 2) for i in range(len(frame))]
    frame.to_csv(data, index=False)
    fx.data_path.unlink()
    vars_ = {
        **fx.vars,
        "raw_dir": str(raw),
        "data_path": str(data),
        "extra_columns": [COLUMN_ATTACK],
        "outcome_description": HOSTILE["jinja"] + HOSTILE["sql"],
        "model_id": "fixture-model",
    }
    res = run_dbt(
        ["run", "--select", "+int_observations_valid", "study_settings", "stg_query_failures"],
        vars_,
        tmp_path / "db.duckdb",
        as_vars=True,
    )
    assert res.returncode == 0, res.output[-3000:]
    valid = res.table("int_observations_valid")
    assert valid[COLUMN_ATTACK].tolist() == frame[COLUMN_ATTACK].tolist()
    settings = json.loads(res.table("study_settings")["settings_json"].iloc[0])
    assert settings["raw_dir"] == str(raw) and settings["data_path"] == str(data)
    assert settings["outcome_description"] == HOSTILE["jinja"] + HOSTILE["sql"]  # not rendered by dbt
    assert settings["extra_columns"] == [COLUMN_ATTACK]
    assert not [p for p in tmp_path.rglob("*") if p.name in ("PWNED.csv", "PWNED_DATA.csv", "x", "y")]
    assert not _named_after("PWNED")  # COPY ... TO would write in the project folder


# ---------------------------------------------------------------- prompts


def test_jinja_in_a_prompt_reaches_the_model_verbatim(server_factory: Any, tmp_path: Path) -> None:
    """The forecast and recall jobs against the loopback server, with Jinja, a quote and
    SQL in both templates and in a data cell: every request carries them as written."""
    from llm_jobs import run_all

    url, state = server_factory()
    jinja = "{{ 7*7 }} {% if true %}x{% endif %} {# c #} it's \"q\" '; drop table verdict; --"
    study = write_openai_study(
        tmp_path,
        url,
        "jinja",
        3,
        forecast_prompt="Headline: {text}\n" + jinja + "\nUp or down?",
        recall_template="On {target_date}, did {entity_name} go up or down? " + jinja,
    )
    data = tmp_path / "jinja.csv"
    data.write_text(data.read_text(encoding="utf-8").replace("reports item 0", "reports {{ 6*7 }}"), encoding="utf-8")
    for job in ("forecast", "recall"):
        assert run_all.main(["--only", job, "--study", str(study), "--yes"]) == 0
    prompts = list(state.attempts)
    assert len(prompts) == 3 + 3  # three forecasts, three (entity, date) recall pairs
    assert all(jinja in p for p in prompts), prompts
    assert any("reports {{ 6*7 }}" in p for p in prompts)
    assert not any("49" in p or "42" in p for p in prompts)


# ---------------------------------------------------------------- the lint

_JOINED = re.compile(r"(?:setting|var)\([^()]*\)\s*~|~\s*(?:setting|var)\(")


def setting_joined_to_sql(text: str) -> list[str]:
    """The lines of a dbt SQL file that join a setting to text with Jinja's `~`."""
    return [line.strip() for line in text.splitlines() if _JOINED.search(line)]


def test_lint_finds_a_setting_joined_to_sql() -> None:
    assert setting_joined_to_sql("{% set p = setting('raw_dir') ~ '/x' %}")
    assert setting_joined_to_sql("select * from glob('{{ '' ~ setting('raw_dir') }}')")
    assert setting_joined_to_sql("{{ var('data_path')~'x' }}")
    assert not setting_joined_to_sql("{{ sql_string(setting('model_id')) }}")


def test_no_macro_or_model_joins_a_setting_to_sql() -> None:
    found = {}
    for folder in ("macros", "models", "tests/dbt", "analyses"):
        for path in (ROOT / folder).rglob("*.sql"):
            hits = setting_joined_to_sql(path.read_text(encoding="utf-8"))
            if hits:
                found[str(path.relative_to(ROOT))] = hits
    assert not found, f"a setting joined to SQL text with `~` (use getvariable, sql_string or sql_identifier): {found}"


def test_no_model_quotes_a_name_by_hand() -> None:
    """Column names reach SQL through sql_identifier, literals through sql_string: a
    hand-written `"{{ ... }}"` or `'{{ ... }}'` around an expression is the old injection."""
    hand = re.compile(r"""(?<![\w])["']\{\{(?!\s*["'])""")
    found = {}
    for folder in ("macros", "models", "tests/dbt", "analyses"):
        for path in (ROOT / folder).rglob("*.sql"):
            if path.name == "study_helpers.sql":  # the two quoting macros themselves
                continue
            hits = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if hand.search(ln)]
            if hits:
                found[str(path.relative_to(ROOT))] = hits
    assert not found, found


# ---------------------------------------------------------------- the Stata do-file

_COMMANDS = ("use ", "esttab ", "capture mkdir ")


def _command_lines(text: str) -> list[str]:
    return [ln.split(" ", 1)[0] for ln in text.splitlines()]


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_the_do_file_holds_no_command_the_study_did_not_ask_for(kind: str, tmp_path: Path) -> None:
    """Each hostile value as the results and outputs folders: refused by the loader, or
    written as a string whose Stata macros are escaped, one command a line as for a plain
    folder name."""
    value = HOSTILE[kind]
    base = _base()
    try:
        resolve({**base, "results_dir": value, "outputs_dir": value})
    except StudyConfigError as err:
        assert str(err).startswith(("setting 'results_dir'", "setting 'outputs_dir'")), err
        return
    folder = str(tmp_path / value)
    plain = stata_do_file(StatsSections.with_defaults(), str(tmp_path / "plain"), str(tmp_path / "plain"))
    text = stata_do_file(StatsSections.with_defaults(), folder, folder)
    assert _command_lines(text) == _command_lines(plain)
    assert stata_string(folder) in text
    for line in text.splitlines():
        if "$" in line and line.startswith(_COMMANDS):
            assert "\\$" in line and not re.search(r"(?<!\\)\$", line), line
        if "`" in line and line.startswith(_COMMANDS):
            assert not re.search(r"(?<!\\)`", line), line


def test_stata_string_refuses_what_it_cannot_carry() -> None:
    for bad in ('a"b', "a\nshell touch pwned", "a\rb"):
        with pytest.raises(ValueError):
            stata_string(bad)
