"""The key of the library-versions cache (lookahead.identity.library_versions): every
process that fingerprints the code (dbt, the lookahead command, a Python session, the
tests) reads one cache, so its key must not depend on path folders that hold no
distribution, and must change when an installed distribution does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lookahead import identity
from lookahead.config import PROJECT_ROOT


def test_folders_without_distributions_leave_the_key_and_a_new_distribution_changes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = identity._installed_key(PROJECT_ROOT)
    scripts = tmp_path / "bin"  # a script's folder, as sys.path[0] of `dbt` or `lookahead`
    scripts.mkdir()
    (scripts / "helper.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(scripts), str(tmp_path / "missing"), *sys.path])
    assert identity._installed_key(PROJECT_ROOT) == base
    installed = scripts / "example_dist-1.0.dist-info"
    installed.mkdir()
    first = identity._installed_key(PROJECT_ROOT)
    assert first != base
    installed.rename(scripts / "example_dist-1.1.dist-info")  # another version
    assert identity._installed_key(PROJECT_ROOT) not in (base, first)
    (scripts / "example_dist-1.1.dist-info").rmdir()
    assert identity._installed_key(PROJECT_ROOT) == base


def test_the_checkout_on_the_path_under_any_spelling_leaves_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dbt has the checkout on its path as profiles/.. (module_paths), where setuptools
    leaves the project's own egg-info; a `lookahead` command run from another folder does
    not have it: one key for both, so neither derives the versions the other just kept.
    A folder named twice (two spellings) counts once; another distribution there counts."""
    base = identity._installed_key(PROJECT_ROOT)
    checkout = tmp_path / "clone"
    (checkout / "profiles").mkdir(parents=True)
    (checkout / "lookahead_bias.egg-info").mkdir()  # what `pip install -e .` leaves
    spelled = [str(checkout / "profiles" / ".."), str(checkout)]
    monkeypatch.setattr(sys, "path", [*sys.path, *spelled])
    assert identity._installed_key(PROJECT_ROOT) == base
    (checkout / "example_dist-2.0.dist-info").mkdir()
    with_dist = identity._installed_key(PROJECT_ROOT)
    assert with_dist != base
    monkeypatch.setattr(sys, "path", [*sys.path, str(checkout / "profiles" / "..")])  # once more
    assert identity._installed_key(PROJECT_ROOT) == with_dist
