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

import pytest
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


#: Where the shared fixture study comes from, as the build records it (build_log, the
#: collision line): a study file, as `lookahead run --study demo/claims/...` passes it
#: (lookahead.children.study_env sets $LOOKAHEAD_STUDY_SOURCE), which is how a user builds.
FIXTURE_SOURCE = "demo/claims/demo_fixture.yml"

#: The paper settings of the shared fixture study: a bootstrap seed and a cluster other
#: than their defaults, so that a reader (test_paper_dbt.py) sees that each reached the
#: paper models; nothing else in the build reads them.
PAPER_SETTINGS = {"bootstrap_seed": 7, "paper_cluster": "entity"}


def build_default_fixture_study(root: Path) -> SharedBuild:
    """`dbt build` of fixture_study.write_fixture_study's default study (with
    PAPER_SETTINGS) under ``root`` (database root/db.duckdb), from the study file
    FIXTURE_SOURCE: the one build that test_dbt_build, test_current_state, test_compare,
    test_no_silent_wrong_result and test_paper_dbt each made in a module fixture of their
    own (test_no_silent_wrong_result's from this source; test_paper_dbt's with these
    paper settings, `--select +paper_tables`)."""
    from lookahead.collision import SOURCE_ENV

    study = write_fixture_study(root)
    study.vars.update(PAPER_SETTINGS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SOURCE_ENV, FIXTURE_SOURCE)  # as lookahead.children.study_env sets it
        # its target/manifest.json: a reader compares against it (`--state`, test_no_silent_wrong_result)
        res = run_dbt(["build"], study.vars, root / "db.duckdb", artifacts=True, unit_tests=True)
    assert res.returncode == 0, res.output[-3000:]
    return SharedBuild.of(study, res)
