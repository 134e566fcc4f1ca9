"""One database, one study: a build never writes over another study's results.

A study builds into outputs/<study_name>.duckdb, so two studies that share a name (a
copied study file whose name was not changed, or a study file and a settings file
that extends it) would share a database, and the second build would silently replace
the first one's tables. Every build records in `build_log` where its settings came
from (:func:`study_source`) and their hash; the run-start check
(macros/check_inputs.sql, ``check_study_collision``) stops a build in one line naming
both studies when the database's last build came from another source *and* had other
settings, unless the build was asked to replace them (`dbt build --full-refresh`,
`lookahead run --rebuild`, `lookahead build --rebuild`).

Why the source and not the settings hash alone: editing a setting of a study and
rebuilding it is the ordinary way to work (the README's "just rerun the same command"),
and it changes the hash; the same study file (or the same `--vars` route, or the
default study) rebuilding with edited settings is the same study. Two different sources
with equal settings are one study too (`lookahead run --study s.yml` then
`dbt build --vars "$(cat s.yml)"`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

#: Set by the lookahead command (lookahead.runs.study_env) to the study file it builds.
SOURCE_ENV = "LOOKAHEAD_STUDY_SOURCE"
#: The sources dbt knows without the lookahead command.
VARS_SOURCE = "dbt --vars"
SETTINGS_FILE_SOURCE = "a settings file ($LOOKAHEAD_STUDY_SETTINGS)"


def default_source() -> str:
    """The source of the default study: what plain `dbt build` and `lookahead run`
    without --study build."""
    from lookahead.config import SCHEMA

    return f"the default study ({SCHEMA.default_study})"


def file_source(study_file: str | os.PathLike[str] | None) -> str:
    """A study file as a source: its path relative to the project folder when inside it."""
    from lookahead.config import PROJECT_ROOT

    if not study_file:
        return default_source()
    p = Path(study_file).resolve()
    try:
        return str(p.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(p)


def study_source(cli_vars: Mapping[str, Any]) -> str:
    """Where this dbt invocation's study came from: the lookahead command's study file,
    `--vars`, a settings file, or the default study (lookahead.config.dbt_study's order)."""
    from lookahead.config import STUDY_SETTINGS_ENV

    if cli_vars:
        return VARS_SOURCE
    if os.environ.get(STUDY_SETTINGS_ENV):
        return os.environ.get(SOURCE_ENV) or SETTINGS_FILE_SOURCE
    return default_source()


def collision_line(database: str, stored: tuple[str, str, str], current: tuple[str, str, str]) -> str:
    """'' when the build may write into the database; else the one line that stops it.

    ``stored`` and ``current`` are (study name, source, settings hash): the database's
    last build and this one."""
    s_name, s_source, s_hash = stored
    c_name, c_source, c_hash = current
    if not s_hash or s_hash == c_hash or s_source == c_source:
        return ""
    return (f"{database} holds the results of study '{s_name}' from {s_source} (settings {s_hash[:12]}); "
            f"this build is study '{c_name}' from {c_source} (settings {c_hash[:12]}) and would "
            "overwrite them: give this study a study_name of its own, or replace those results "
            "with `dbt build --full-refresh` (`lookahead run --rebuild`)")
