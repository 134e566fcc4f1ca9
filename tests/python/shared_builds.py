"""The built studies the suite shares: each built once per test process by a session
fixture (tests/conftest.py) and read by every test file that needs that study with those
settings, where each file used to build its own.

Why once per process, with every reader in one process, rather than one copy shared by
all xdist workers: some readers edit one of the study's input files for a moment and put
it back (a stale-result test appends to the data file, then restores it); a build read by
two workers at once would be read by another file's tests while it is edited. `make test`
(`--dist loadfile`) runs the files that read one build as one work unit, one file after
another in one worker (SHARED_BUILDS and the scheduler in tests/conftest.py), so the study
is built once per run and no reader sees another's edit.

What a reader may do: read the database (read-only) and the study's files; a test that
changes the database works on a copy (`shutil.copy(db, tmp_path / ...)`), one that edits
an input file restores it in a `finally`. :meth:`SharedBuild.check_unchanged` runs when
each reading file starts and when the session ends, and fails naming the file a reader
left changed: a broken rule is an error that says so, not a wrong result in the next
file's tests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from dbt_runner import DbtResult, run_dbt
from fixture_study import FixtureStudy, write_fixture_study


def _digests(study: FixtureStudy, db: Path) -> dict[Path, str]:
    """The digest of the database and of every input file the build read (the data file,
    every file under the raw answers' folder)."""
    files = [db, study.data_path, *sorted(p for p in study.raw_dir.rglob("*") if p.is_file())]
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@dataclass(frozen=True)
class SharedBuild:
    """One study, built: its files (``study``), dbt's result and database (``result``),
    and the digest of every file a reader must leave as it found it."""

    study: FixtureStudy
    result: DbtResult
    digests: dict[Path, str]

    @classmethod
    def of(cls, study: FixtureStudy, result: DbtResult) -> SharedBuild:
        """The build as it is now: the digests every later check compares against."""
        return cls(study, result, _digests(study, result.db))

    def check_unchanged(self) -> None:
        """Fail naming each file that differs from the build's (changed, added or gone)."""
        now = _digests(self.study, self.result.db)
        changed = sorted(str(p) for p in set(now) | set(self.digests) if now.get(p) != self.digests.get(p))
        assert not changed, "a test left the shared build changed (work on a copy, or restore the file): " + ", ".join(changed)


def build_default_fixture_study(root: Path) -> SharedBuild:
    """`dbt build` of fixture_study.write_fixture_study's default study under ``root``
    (database root/db.duckdb), as each reading file's module fixture built it before."""
    study = write_fixture_study(root)
    res = run_dbt(["build"], study.vars, root / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    return SharedBuild.of(study, res)
