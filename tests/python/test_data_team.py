"""The paths a data team walks with plain dbt (issue 37): a study's relative paths resolved
against the project folder from any working folder, a study that `extends:` another
handed to `dbt build --vars`, and every result mart previewable with `dbt show --select`
behind an enforced contract. These are the fast checks; test_readme_data_team.py walks the
README's commands from a temporary folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
import yaml

from lookahead import dbt_plugin
from lookahead.config import (
    PROJECT_ROOT,
    SCHEMA,
    StudyConfigError,
    check_dbt_vars,
    load_study,
    read_study_file,
    study_from_dbt_vars,
)

CLAIM_STUDY = PROJECT_ROOT / "demo" / "claims" / "demo_contaminated.yml"
SQL_DIRS = ("models", "macros", "tests/dbt", "analyses")


def _dbt_values(cli: dict) -> str:
    """What dbt's run-start check hands the package: var() of every declared setting, i.e.
    the --vars as given over dbt_project.yml's generated block (null where neither has it)."""
    block = yaml.safe_load((PROJECT_ROOT / "dbt_project.yml").read_text())["vars"]
    return json.dumps({n: cli.get(n, block.get(n)) for n in SCHEMA.names()}, default=str)


def test_a_study_that_extends_another_builds_through_vars_as_through_the_loader() -> None:
    """`dbt build --vars "$(cat demo/claims/demo_contaminated.yml)"`: the file's `extends:`
    is flattened by the loader of study files, so dbt builds the study `lookahead` builds,
    and the run-start check passes although dbt's var() never saw the inherited settings."""
    text = CLAIM_STUDY.read_text()
    given = yaml.safe_load(text)
    assert "extends" in given and "model_id" not in given  # inherited from the base file
    assert study_from_dbt_vars(text).vars == load_study(CLAIM_STUDY).vars
    assert check_dbt_vars(_dbt_values(given), text) == ""
    # the clean claim study extends a base whose identifying settings differ from the
    # default study's (dbt's var() holds the default's): still no mismatch reported
    clean = PROJECT_ROOT / "demo" / "claims" / "demo_clean.yml"
    assert check_dbt_vars(_dbt_values(yaml.safe_load(clean.read_text())), clean.read_text()) == ""
    assert study_from_dbt_vars(clean.read_text()).vars == load_study(clean).vars
    # a setting the --vars text gives itself is still compared with dbt's
    assert "regenerate dbt_project.yml" in check_dbt_vars(_dbt_values({**given, "mink_k": 0.3}), text)


@pytest.mark.parametrize(
    "extends, message",
    [
        ("demo/studies/nope.yml", r"--vars: 'extends: demo/studies/nope.yml': study file '.*nope.yml' does not exist"),
        ("", r"--vars: 'extends' must name a study file"),
    ],
)
def test_a_bad_extends_in_vars_is_one_line(extends: str, message: str) -> None:
    text = yaml.safe_dump({"extends": extends, "claims_bm25_k": 3})
    with pytest.raises(StudyConfigError, match=message):
        study_from_dbt_vars(text)
    assert re.match(message, check_dbt_vars("{}", text)) and "\n" not in check_dbt_vars("{}", text)


def test_extends_in_a_file_and_in_vars_is_one_rule(tmp_path: Path) -> None:
    base = tmp_path / "base.yml"
    base.write_text(
        CLAIM_STUDY.read_text().replace(
            "extends: demo/studies/contaminated.yml", f"extends: {PROJECT_ROOT / 'demo/studies/contaminated.yml'}"
        )
    )
    child = {"extends": str(base), "claims_bm25_k": 7}
    assert study_from_dbt_vars(yaml.safe_dump(child)).vars == {**load_study(CLAIM_STUDY).vars, "claims_bm25_k": 7}
    (tmp_path / "child.yml").write_text(yaml.safe_dump(child))
    assert read_study_file(tmp_path / "child.yml")["claims_bm25_k"] == 7


def test_every_path_setting_dbt_reads_is_resolved_against_the_project() -> None:
    """dbt's SQL and Jinja read a path setting only through setting_path (resolved against
    the project folder, as Study.resolve does): DuckDB would read setting() of a relative
    path from the working folder, which `--project-dir` leaves wherever the user is."""
    paths = [n for n, s in SCHEMA.settings.items() if s.type == "path"]
    assert {"data_path", "raw_dir"} <= set(paths)
    bad = [
        f"{f.relative_to(PROJECT_ROOT)}: setting('{n}')"
        for d in SQL_DIRS
        for f in sorted((PROJECT_ROOT / d).rglob("*.sql"))
        for n in paths
        if re.search(rf"\bsetting\(\s*['\"]{n}['\"]", f.read_text())
    ]
    assert not bad, bad


def test_the_plugin_serves_paths_resolved_against_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From another working folder the plugin hands DuckDB the default study's files in the
    project (the sources' variables and setting_path), never the working folder's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(tmp_path / "db.duckdb"))
    monkeypatch.delenv("LOOKAHEAD_STUDY_SETTINGS", raising=False)
    monkeypatch.setattr(dbt_plugin, "_cli_vars", lambda: {})
    study = load_study()
    con = duckdb.connect()
    try:
        dbt_plugin.Plugin(name="lookahead", plugin_config={}).configure_connection(con)
        cur = con.cursor()
        dbt_plugin.use_study(cur)
        raw = cur.sql("select getvariable('lookahead_study').raw_dir").fetchone()[0]
        data = json.loads(cur.sql("select lookahead_setting_path('data_path')").fetchone()[0])
        assert raw == str(PROJECT_ROOT / study.output.raw_dir)
        assert data == str(PROJECT_ROOT / study.input.data_path)
        observations_sql = cur.sql("select getvariable('lookahead_study').observations_sql").fetchone()[0]
        assert str(PROJECT_ROOT / study.input.data_path) in observations_sql
        assert json.loads(cur.sql("select lookahead_setting_path('results_dir')").fetchone()[0]) is None
        cur.close()
    finally:
        con.close()


def test_every_python_result_mart_has_a_contracted_view() -> None:
    """Each Python result mart (python_models/marts/<area>/<mart>_py.py; the gates are
    checks, previewed through gx_validation_results) has the SQL view <mart> beside it under
    models/marts/<area>/, with an enforced contract that gives every column a data_type."""
    missing = []
    for py in sorted((PROJECT_ROOT / "python_models" / "marts").glob("*/*.py")):
        area = py.parent.name
        if area == "gates":
            continue
        if not py.stem.endswith("_py"):
            missing.append(f"{py.relative_to(PROJECT_ROOT)}: a Python mart is named <mart>_py")
            continue
        mart = py.stem.removesuffix("_py")
        view = PROJECT_ROOT / "models" / "marts" / area / f"{mart}.sql"
        if f"contracted_view(ref('{mart}_py'))" not in (view.read_text() if view.exists() else ""):
            missing.append(f"{view.relative_to(PROJECT_ROOT)}: no contracted view of {mart}_py")
            continue
        doc = yaml.safe_load((view.parent / f"_{area}__models.yml").read_text())
        node = next((m for m in doc["models"] if m["name"] == mart), {})
        if (node.get("config") or {}).get("contract") != {"enforced": True}:
            missing.append(f"{mart}: contract not enforced")
        untyped = [c["name"] for c in node.get("columns", []) if not c.get("data_type")]
        if not node.get("columns") or untyped:
            missing.append(f"{mart}: columns without data_type {untyped}")
    assert not missing, "\n".join(missing)
