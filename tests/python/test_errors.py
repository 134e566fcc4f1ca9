"""One error root (lookahead.errors): every exception the package raises on purpose
descends from LookaheadError, each failure a user can meet is a UserError carrying its
line and exit code, and the `lookahead` command catches that root once (lookahead.guard),
not error by error."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import llm_jobs
import lookahead
from lookahead.errors import LookaheadError, UserError

ROOT = Path(__file__).resolve().parents[2]


def _modules():
    for pkg in (lookahead, llm_jobs):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            try:
                yield importlib.import_module(info.name)
            except ModuleNotFoundError as err:  # an optional backend's library (vllm) not installed here
                if err.name and err.name.split(".")[0] in {"vllm", "ray"}:
                    continue
                raise


def test_every_exception_the_package_defines_has_the_one_root():
    classes = [
        obj
        for mod in _modules()
        for obj in vars(mod).values()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == mod.__name__
    ]
    assert len(classes) >= 20  # the scan saw the package's exceptions (GateFailed, CacheError, ...)
    outside = [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, LookaheadError)]
    assert not outside, f"exceptions outside lookahead.errors' root: {outside}"


def test_the_command_catches_the_root_once_not_error_by_error():
    """lookahead/cli.py has no handler for a UserError subclass: the guard's one catch
    prints the error's own line (a handler here would print a second format)."""
    user_errors = set()
    for mod in _modules():
        user_errors |= {name for name, obj in vars(mod).items() if inspect.isclass(obj) and issubclass(obj, UserError)}
    tree = ast.parse((ROOT / "lookahead" / "cli.py").read_text())
    caught = {
        n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
        for h in ast.walk(tree)
        if isinstance(h, ast.ExceptHandler) and h.type is not None
        for n in ast.walk(h.type)
        if isinstance(n, (ast.Name, ast.Attribute))
    }
    assert not caught & user_errors, sorted(caught & user_errors)


@pytest.mark.parametrize(
    ("make", "line", "code"),
    [
        (
            lambda: __import__("lookahead.guard", fromlist=["JobStop"]).JobStop("parse rate 0.40 is under 0.8", 3),
            "stopped: parse rate 0.40 is under 0.8",
            3,
        ),
        (
            lambda: __import__("lookahead.backends.base", fromlist=["BackendFatal"]).BackendFatal("HTTP 401: bad key"),
            "stopped: HTTP 401: bad key; finished answers are saved; run the same command again to resume.",
            4,
        ),
        (
            lambda: __import__("lookahead.config", fromlist=["StudyConfigError"]).StudyConfigError("setting 'x': bad"),
            "error: setting 'x': bad",
            2,
        ),
        (
            lambda: __import__("lookahead.children", fromlist=["JobEnvironmentError"]).JobEnvironmentError("no .venv-vllm"),
            "error: no .venv-vllm",
            1,
        ),
    ],
)
def test_a_user_error_prints_its_own_line_with_its_exit_code(make, line, code, capsys):
    from lookahead.guard import guarded_line

    def fail() -> int:
        raise make()

    assert guarded_line(fail) == code
    err = capsys.readouterr().err
    assert err.strip() == line and "Traceback" not in err


def test_a_study_file_that_is_not_there_is_one_line_from_the_command(tmp_path, capsys):
    from lookahead.cli import main

    assert main(["check", "--study", str(tmp_path / "missing.yml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "missing.yml" in err[0], err
