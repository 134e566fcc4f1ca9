"""Typed settings by concern (lookahead/study_settings.yml, lookahead/settings_sections.py).

Code reads a setting as ``study.<concern>.<setting>``: the section classes are generated
from the one declaration and must be current; no code outside the loader looks a setting
up by its name in a string (``study["model_id"]``, ``options.get("concurrency", 8)``),
which would state a second default or miss a renamed setting; dbt's vars carry exactly
the settings dbt SQL and Jinja read with ``var(...)``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from lookahead.config import PROJECT_ROOT, SCHEMA, load_study, section_class, write_sections
from lookahead.settings_sections import BackendSettings, StudySections

CODE = ("lookahead", "llm_jobs", "python_models", "research", "benchmarks")
LOADER = {Path("lookahead/config.py"), Path("lookahead/settings_sections.py")}
# Receivers that hold raw lines, input rows, result rows or query parameters, whose
# fields share a name with a setting (model_id, backend, seed, lap_measure, n_samples):
# a field of a record, not a setting.
RECORDS = {"rec", "row", "r", "params", "df", "rob", "line", "record", "out", "pair", "first", "b"}
# Study files being written or overridden (the loader's input, not a setting read; `answers`:
# lookahead init's intake answers, the study file it writes) and the
# declaration itself (allowed values, defaults).
LOADER_INPUT = {"vars_", "overrides", "cs", "answers"}
DECLARATION = {"SCHEMA.settings", "CHOICES"}
# dbt reads these through var() where no setting is meant (none today).
DBT_FOLDERS = ("models", "macros", "analyses", "tests/dbt", "python_models", "profiles")


def _receiver(node: ast.AST) -> str:
    """The last name of the expression a lookup is made on: ``ctx.study`` -> ``study``."""
    while isinstance(node, (ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else type(node).__name__


def string_lookups(root: Path = PROJECT_ROOT) -> list[str]:
    """Every ``x["<setting>"]``, ``x.get("<setting>"...)`` and ``x.path("<setting>")`` outside
    the loader, on anything but a record."""
    names = set(SCHEMA.settings)
    found = []
    for folder in CODE:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if rel in LOADER:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                key, on = None, None
                if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                    key = node.slice.value if isinstance(node.slice, ast.Constant) else None
                    on = node.value
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get", "path")
                    and node.args
                ):
                    key = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
                    on = node.func.value
                on_study = on is not None and _receiver(on) == "study"  # any key: a Study has no lookup
                if on_study or (
                    isinstance(key, str)
                    and key in names
                    and _receiver(on) not in RECORDS | LOADER_INPUT
                    and ast.unparse(on) not in DECLARATION
                ):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_setting_is_looked_up_by_a_string_outside_the_loader():
    found = string_lookups()
    assert not found, "read settings as study.<concern>.<setting> (lookahead/settings_sections.py):\n" + "\n".join(found)


def test_the_scan_sees_a_lookup(tmp_path):
    """The scan itself: a planted lookup on a study and a second default are both found."""
    for folder in CODE:
        (tmp_path / folder).mkdir()
    (tmp_path / "llm_jobs" / "planted.py").write_text(
        'def f(ctx, options, rec):\n    a = ctx.study["model_id"]\n    b = options.get("concurrency", 8)\n'
        '    return a, b, rec["model_id"]\n',
        encoding="utf-8",
    )
    assert string_lookups(tmp_path) == [
        "llm_jobs/planted.py:2: ctx.study['model_id']",
        "llm_jobs/planted.py:3: options.get('concurrency', 8)",
    ]


def test_the_sections_are_generated_from_the_declaration():
    assert write_sections(check=True), "run python scripts/generated_files.py --write-sections"


def test_every_setting_has_one_concern_and_every_section_its_settings():
    study = load_study()
    for concern in SCHEMA.concerns:
        section = getattr(study, concern)
        assert type(section).__name__ == section_class(concern)
        mine = [n for n, s in SCHEMA.settings.items() if s.concern == concern]
        assert list(vars(section)) == mine, concern
        assert all(getattr(section, n) == study.vars[n] for n in mine), concern
    assert sum(len(vars(getattr(study, c))) for c in SCHEMA.concerns) == len(SCHEMA.settings)
    assert isinstance(study, StudySections)


def test_a_section_is_frozen_and_its_defaults_are_the_declared_ones():
    s = BackendSettings.with_defaults(base_url="http://127.0.0.1/v1", concurrency=None)
    assert s.concurrency == SCHEMA.settings["concurrency"].default == 8  # None given: the declared default
    assert s.model_id is None and s.base_url == "http://127.0.0.1/v1"
    with pytest.raises(AttributeError):
        s.concurrency = 2  # type: ignore[misc]


def dbt_var_names(root: Path = PROJECT_ROOT) -> set[str]:
    """The settings dbt SQL and Jinja read by name: setting('<name>') (at run time, the
    study of the build; macros/settings.sql), setting_path('<name>') (a path setting resolved
    against the project folder) or var('<name>'...); while dbt parses, both
    read dbt_project.yml's vars."""
    pat = re.compile(r"""\b(?:var|setting|setting_path)\(\s*['"]([a-z_0-9]+)['"]""")
    out: set[str] = set()
    for folder in DBT_FOLDERS:
        for path in (root / folder).rglob("*"):
            if path.suffix in (".sql", ".yml", ".py") and path.is_file():
                out |= set(pat.findall(path.read_text(encoding="utf-8")))
    return out


def test_dbt_vars_carry_only_what_dbt_reads():
    marked = {n for n, s in SCHEMA.settings.items() if s.dbt}
    assert dbt_var_names() == marked, "mark `dbt: true` in lookahead/study_settings.yml exactly where setting() or var() reads"
    with open(PROJECT_ROOT / "dbt_project.yml", encoding="utf-8") as fh:
        assert set(yaml.safe_load(fh)["vars"]) == marked
