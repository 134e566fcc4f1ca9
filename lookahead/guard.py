"""How a command ends: its exit code, and one line, never a traceback.

Shared by the ``lookahead`` command (lookahead.cli) and every LLM job (llm_jobs): output
passes through lookahead.masking while a command runs, a user-facing stop (:class:`JobStop`)
prints its message and exits with its code, and every other failure is turned into one line
that says what to do (answers already written stay in the cache, so a job's line ends
with how to resume).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

from lookahead.errors import RESUME, UserError
from lookahead.masking import MaskedStream, install_log_filter, mask

EXIT_OK, EXIT_DECLINED, EXIT_USER_ERROR, EXIT_PARSE_RATE = 0, 1, 2, 3

EXIT_INCOMPLETE = 4  # some queries got no complete answer; rerun the same command to resume

EXIT_UNEXPECTED = 70


class JobStop(UserError):
    """A job stopped on purpose: message printed without a traceback, then exit ``code``."""

    prefix = "stopped"

    def __init__(self, message: str, code: int = EXIT_USER_ERROR) -> None:
        super().__init__(message)
        self.exit_code = code


@contextlib.contextmanager
def masked_output() -> Iterator[None]:
    """stdout and stderr pass through lookahead.masking.mask while a job runs."""
    install_log_filter()
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, MaskedStream):
        sys.stdout = MaskedStream(sys.stdout)
    if not isinstance(sys.stderr, MaskedStream):
        sys.stderr = MaskedStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def describe_os_error(exc: OSError) -> str:
    """A file-system failure as one line naming the file and what to do."""
    where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
    what = exc.strerror or type(exc).__name__
    hint = {
        28: "free some space",
        27: "the file-size limit is reached (ulimit -f)",
        13: "make the folder writable or point the setting at one that is",
        30: "the file system is read-only: point raw_dir/outputs_dir at a writable folder",
    }
    return f"cannot use{where}: {what}; {hint.get(exc.errno or 0, 'check the path')}"


def _one_line(fn: Callable[[], int], saved: str) -> int:
    """``fn``'s exit code; every way it can fail prints one line (ending in ``saved`` where
    answers may have been written) and returns its exit code, never a traceback.
    LOOKAHEAD_DEBUG=1 re-raises unexpected errors for developers."""
    try:
        return fn()
    except UserError as exc:  # the one catch of the package's root for what a user can meet
        print(mask(exc.line(saved)), file=sys.stderr)
        return exc.exit_code
    except FileNotFoundError as exc:
        print(f"error: {mask(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as exc:
        print(f"error: {mask(describe_os_error(exc))}{saved}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"interrupted: finished answers are saved; {RESUME}", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("LOOKAHEAD_DEBUG"):
            raise
        print(
            f"error: unexpected {type(exc).__name__}: {mask(exc)}{saved} (LOOKAHEAD_DEBUG=1 shows the traceback)", file=sys.stderr
        )
        return EXIT_UNEXPECTED


def guarded_line(fn: Callable[[], int]) -> int:
    """Run ``fn`` with output masked, failures in one line (``_one_line``).

    For commands that print their own progress (the ``lookahead`` wrapper): unlike
    ``guarded`` it adds no 'done in' line."""
    with masked_output():
        return _one_line(fn, "")


def guarded(fn: Callable[[], int]) -> int:
    """Run a job with output masked, failures in one line (``_one_line``), then 'done in'.

    Answers already written stay in the cache whatever happens, so each failure message
    ends with how to resume."""
    from lookahead.stopping import stop_handlers

    t0 = time.time()
    # SIGTERM as SIGINT; the query loop writes what is in flight first (lookahead.stopping)
    with stop_handlers(), masked_output():
        code = _one_line(fn, f"; finished answers are saved; {RESUME}.")
        if code == 0:
            print(f"done in {time.time() - t0:.1f} s")
        return code
