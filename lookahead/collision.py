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

Why the identifying settings too: `dbt build --vars` (or a settings file without the
lookahead command) names no file, so every such build has one source and two different
study files passed that way would read as one study. For those sources the study is what
its identifying settings say (``identifies: true`` in lookahead/study_settings.yml: its
data, model, prompts, labels and cutoff; :attr:`lookahead.config.Study.identity_hash`,
recorded in `build_log.identity_hash`): editing any other setting rebuilds as before,
changing one of them under the same study_name is another study and is stopped.

The lookahead command checks this (:func:`database_collision`) before it retires
anything, so a refused build moves no report and marks no verdict of the study whose
results it would have replaced; plain dbt checks it in the first run-start hook, before
the hook that records the build and retires its report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from lookahead.config import Study

#: Set by the lookahead command (lookahead.children.study_env) to the study file it builds.
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


class BuildIdentity(NamedTuple):
    """What identifies a build: study name, source, settings hash and the hash of its
    identifying settings ('' when a database recorded none)."""

    name: str
    source: str
    settings_hash: str
    identity_hash: str = ""


def names_a_file(source: str) -> bool:
    """Whether a source tells studies apart by itself (a study file, the default study),
    unlike `dbt --vars` or an anonymous settings file, which every such build shares."""
    return source not in (VARS_SOURCE, SETTINGS_FILE_SOURCE)


def collision_line(database: str, stored: tuple[str, ...], current: tuple[str, ...]) -> str:
    """'' when the build may write into the database; else the one line that stops it.

    ``stored`` and ``current`` are :class:`BuildIdentity` tuples (name, source, settings
    hash[, identity hash]): the database's last build and this one."""
    s, c = BuildIdentity(*stored), BuildIdentity(*current)
    if not s.settings_hash or s.settings_hash == c.settings_hash:
        return ""
    if s.source == c.source and (names_a_file(c.source) or s.identity_hash == c.identity_hash):
        return ""
    other = (
        f" with other identifying settings (identity {s.identity_hash[:12] or 'not recorded'} against {c.identity_hash[:12]})"
        if s.source == c.source
        else ""
    )
    return (
        f"{database} holds the results of study '{s.name}' from {s.source} (settings {s.settings_hash[:12]}); "
        f"this build is study '{c.name}' from {c.source}{other} (settings {c.settings_hash[:12]}) and would "
        "overwrite them: give this study a study_name of its own, or replace those results "
        "with `dbt build --full-refresh` (`lookahead run --rebuild`)"
    )


def last_build(database: Path) -> BuildIdentity | None:
    """The identity the database's last build recorded in build_log (None for a database
    without one, or one another process holds: the build's own lock check says so)."""
    import duckdb

    if not database.is_file():
        return None
    try:
        con = duckdb.connect(str(database), read_only=True)
    except duckdb.Error:
        return None
    try:
        cols = {
            r[0] for r in con.sql("select column_name from information_schema.columns where table_name = 'build_log'").fetchall()
        }
        if "study_source" not in cols:
            return None
        identity = "coalesce(identity_hash, '')" if "identity_hash" in cols else "''"
        row = con.sql(
            f"select coalesce(study_name, ''), coalesce(study_source, ''), settings_hash, {identity} "
            "from build_log where settings_hash is not null order by finished_at desc limit 1"
        ).fetchone()
    finally:
        con.close()
    return BuildIdentity(*row) if row else None


def database_collision(study: Study, source: str) -> str:
    """:func:`collision_line` for a build of ``study`` from ``source`` into its database,
    checked before the lookahead command retires anything ('' when it may build)."""
    stored = last_build(study.database)
    if stored is None:
        return ""
    return collision_line(
        str(study.database), stored, BuildIdentity(study.name, source, study.settings_hash, study.identity_hash)
    )
