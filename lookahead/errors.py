"""The package's exceptions have one root, and a failure a user can meet one class.

Why one root: a command catches :class:`UserError` once (lookahead.guard, around every
``lookahead`` command and every LLM job) and prints the one line the error carries, with
its exit code; anything else that escapes is a bug and is reported as "unexpected".
A module that raises on purpose subclasses one of these, keeping a builtin base where a
caller may already catch it (a bad setting is still a ``ValueError``).

This module sits below every other (it imports nothing of the package), so any module
can raise without importing another to do it."""

from __future__ import annotations

#: what a job's line ends with when a rerun picks up where it stopped
RESUME = "run the same command again to resume"


class LookaheadError(Exception):
    """The root: every exception the package raises on purpose. Those that are not a
    :class:`UserError` are signals between its own parts (a refused reply, a planned run)
    that never reach a user as such."""


class UserError(LookaheadError):
    """A failure a user can meet and fix. ``str(err)`` says what and where (the setting,
    row, column or file) and what to do; the command prints :meth:`line` and exits with
    :attr:`exit_code`."""

    #: the word the printed line starts with
    prefix: str = "error"
    #: the command's exit status (lookahead.guard's EXIT_USER_ERROR)
    exit_code: int = 2

    def line(self, saved: str = "") -> str:
        """The one line printed for this failure. ``saved`` is what a job adds when
        answers may have been written ("finished answers are saved; ..."); a failure that
        no rerun changes leaves it out."""
        return f"{self.prefix}: {self}"


class StudyConfigError(UserError, ValueError):
    """A missing or invalid study setting; the message names the setting."""
