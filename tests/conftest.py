"""What every test shares: the test tiers, a few fixtures, and the built studies
(SHARED_BUILDS: each built once per run and read by every file that needs it).

Tiers (markers, declared in pyproject.toml; `--strict-markers` rejects any other name):
- ``slow``: minutes of CPU or a real model; left out of `make test`, run by `make test-slow`.
- ``vllm``: needs the vLLM environment `.venv-vllm` (bash scripts/make_vllm_env.sh); without
  it the test is skipped with that fix as the reason.
- ``gpu``: needs a CUDA GPU that torch sees; skipped without one, when the test is about
  to run (pytest_runtest_setup: the question imports torch).
A resource tier is skipped here, in one place, rather than by a `skipif` in each file.

The helper modules beside the tests (tests/python/dbt_runner.py, fixture_study.py, ...)
are importable by name because pyproject.toml puts tests/python on pytest's `pythonpath`
(and the project root, for `lookahead`, `llm_jobs` and `research`): no test edits sys.path.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    from shared_builds import SharedBuild  # tests/python, on pytest's pythonpath

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


@functools.cache
def _cuda_available() -> bool:
    """Whether torch sees a CUDA GPU: asked once per process, when the first test of the
    ``gpu`` tier is about to run (importing torch costs seconds: not at collection, which
    every xdist worker pays for every file)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


#: The test files that take longest (a dbt build, a demo run or an LLM job in most of their
#: tests), longest first: `make test` hands whole files to its workers in collection order
#: (`--dist loadfile --no-loadscope-reorder`), so these start first and the short files
#: fill in around them. xdist gives each worker one work unit, then keeps two queued on
#: each (pytest-xdist 3.8, LoadScopeScheduling._reschedule), so what decides the wall time
#: is that no long file is left for the end, where it kept one worker busy alone while the
#: other had finished (test_shared_raw.py used to start among the last files by its name).
#: By default xdist starts the files with the most tests first, which left long files with
#: few tests last. The seconds: each file's tests summed (the JUnit report) in a CI-like
#: run (a fresh clone after its `make demo`, 2 workers, 620.7 s in all, 9a187d1); for the
#: order only: no test depends on it. The files of one shared build (SHARED_BUILDS) are one
#: unit, placed where the first of them is.
LONGEST_FIRST = (
    # one unit (SHARED_BUILDS' fixture_build, built once), 253 s: test_dbt_build 107 s,
    # test_no_silent_wrong_result 76 s (its own builds of the study among them: refused or
    # selected builds on copies), test_current_state 65 s, test_compare, test_paper_dbt
    "test_dbt_build.py",
    "test_current_state.py",
    "test_compare.py",
    "test_no_silent_wrong_result.py",
    "test_readme_data_team.py",  # 113 s: the README's commands, two demo studies' jobs and builds
    "test_demo_end_to_end.py",  # 71 s: `lookahead run` on the demo, twice
    "test_shared_raw.py",  # 65 s: three builds of two studies on one raw_dir
    "test_ray_runner.py",  # 57 s: a Ray run with a worker killed, then the same jobs alone
    "test_jobs_transformers.py",  # 51 s: about 20 job runs on a tiny model
    "test_openai_backend.py",  # 50 s: 58 tests against the loopback server
    "test_fused_pass.py",
    "test_line_serves_every_study.py",
    "test_claims_own_task.py",
    "test_claims_batch.py",
    "test_claims_kinds.py",
    "test_stopping.py",
    "test_claims_extract_openai.py",
    "test_safe_outputs.py",
    "test_planted_files.py",
)


#: Each shared build (a session fixture below, one per built study) and the test files that
#: read it. `make test` runs these files one after another in one worker (one work unit,
#: SharedBuildScheduling), so the study is built once for the whole run, not once per
#: worker that happens to get one of them. A test that asks for a shared build from a file
#: not listed here stops the collection with one line naming the file.
SHARED_BUILDS: dict[str, tuple[str, ...]] = {
    "fixture_build": (
        "test_dbt_build.py",
        "test_current_state.py",
        "test_compare.py",
        "test_no_silent_wrong_result.py",
        "test_paper_dbt.py",
    ),
}


def _shared_build_unit(file_name: str) -> str | None:
    """The work unit of a file that reads a shared build (named after the build), or None."""
    return next((f"shared build {name}" for name, files in SHARED_BUILDS.items() if file_name in files), None)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under `--dist loadfile` (`make test`): xdist's file-by-file scheduling, except that
    the files reading one shared build (SHARED_BUILDS) are one work unit. Other modes are
    left to xdist. Why a scheduler and not `--dist loadgroup`: loadgroup sends every test
    without a group mark to any worker, one by one, so a file's module fixture would be
    built on both workers. It overrides xdist's `_split_scope` (pytest-xdist 3.8), the one
    method that names a test's work unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedBuildScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return _shared_build_unit(Path(file).name) or file

    return SharedBuildScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the vLLM tier where .venv-vllm is missing (the gpu tier is asked for at setup:
    pytest_runtest_setup); put the longest files first (LONGEST_FIRST); refuse a shared
    build read from a file SHARED_BUILDS does not list for it (it would be built again in
    another worker)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept
    for item in items:
        for name in SHARED_BUILDS.keys() & set(getattr(item, "fixturenames", ())):
            if item.path.name not in SHARED_BUILDS[name]:
                raise pytest.UsageError(
                    f"{item.path.name} reads the shared build {name!r}: add the file to "
                    f"SHARED_BUILDS[{name!r}] in tests/conftest.py"
                )
    if VLLM_PYTHON.exists():
        return
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(pytest.mark.skip(reason="needs the vLLM environment .venv-vllm: bash scripts/make_vllm_env.sh"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test of the ``gpu`` tier where torch sees no CUDA GPU, before its fixtures
    are set up. Here and not at collection: the question imports torch, and each xdist
    worker collects every file, GPU tests included, while at most one of them runs one."""
    if item.get_closest_marker("gpu") is not None and not _cuda_available():
        # a mark, read by pytest's skip check (tryfirst too; this conftest, registered later, runs
        # first): the skip is reported at the test, and its fixtures are never set up
        item.add_marker(pytest.mark.skip(reason="no CUDA GPU here"))


@pytest.fixture(scope="session")
def demo_study() -> dict:
    """The default study's settings (demo/studies/contaminated.yml, what plain `dbt build`
    builds), as the dict a test passes to dbt's --vars or edits first."""
    return yaml.safe_load((ROOT / "demo" / "studies" / "contaminated.yml").read_text())


@pytest.fixture(scope="session", autouse=True)
def _state_dir() -> Path:
    """The tool's state folder (lookahead.artefacts.state_dir: the key that signs swap
    journals and manifests) in the system's temporary folder, for every test and every
    command it starts: no test writes into the user's home. One folder for every run, not
    one per run: a dbt build of a test study retires its report set in the project's
    results/<study_name>/, and the next run must read the manifest it signed there.

    When the user has a key (`make demo` made one, and signed the demo's reports with it),
    the folder holds a copy of it, read and never written: `make test` after `make demo`
    (CI's order) then reads the demo's manifests in results/ as the user's own commands do.
    The folder's name carries the key's digest, so another key is another folder."""
    import hashlib
    import shutil

    from lookahead.artefacts import SIGNING_KEY_FILE, STATE_DIR_ENV, state_dir

    user_key = state_dir() / SIGNING_KEY_FILE  # the user's, where their own commands look for it
    base = Path(tempfile.gettempdir()) / f"lookahead-test-state-{os.getuid()}"
    if user_key.is_file():
        folder = base.with_name(f"{base.name}-{hashlib.sha256(user_key.read_bytes()).hexdigest()[:12]}")
        folder.mkdir(mode=0o700, exist_ok=True)
        if not (folder / SIGNING_KEY_FILE).is_file():
            shutil.copyfile(user_key, folder / SIGNING_KEY_FILE)
            (folder / SIGNING_KEY_FILE).chmod(0o600)
    else:
        folder = base
        folder.mkdir(mode=0o700, exist_ok=True)
    os.environ[STATE_DIR_ENV] = str(folder)
    return folder


@pytest.fixture(scope="session")
def fixture_build(tmp_path_factory: pytest.TempPathFactory, _state_dir: Path) -> Iterator[SharedBuild]:
    """The default fixture study (tests/python/fixture_study.py), built by `dbt build` once
    per test process and read by the files SHARED_BUILDS lists (one worker runs them all),
    which each built it in a module fixture of their own. Its source and paper settings,
    and the rules for its readers (a copy for a changed database, a restored input file):
    tests/python/shared_builds.py. Checked unchanged again when the session ends."""
    from shared_builds import build_default_fixture_study

    built = build_default_fixture_study(tmp_path_factory.mktemp("fixture_build"))
    yield built
    built.check_unchanged()
