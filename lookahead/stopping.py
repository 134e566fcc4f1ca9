"""Stopping a command stops its work: the `lookahead` wrapper passes SIGINT and SIGTERM on
to the child it runs, a child notices when the wrapper is gone, and a job that is asked
to stop writes the answers already received before it exits.

Why: the LLM jobs pay per request. Without this, a SIGTERM to `lookahead run` ended the
wrapper and left its job child asking the server, and after a `kill -9` of the wrapper the
child went on for minutes, unseen.

- The wrapper (:func:`run_child`) starts each child with a parent-death signal (Linux's
  prctl PR_SET_PDEATHSIG: SIGTERM when the wrapper dies, even by SIGKILL), names itself
  in $LOOKAHEAD_PARENT_PID, and while the child runs forwards SIGINT and SIGTERM to it.
- A job (:func:`stop_handlers`, from lookahead.guard) takes SIGTERM like SIGINT.
  Inside the query loop (:func:`draining`) a signal only sets :data:`STOP`: the loop
  asks nothing new, writes the answers of the requests already in flight, and stops
  (:func:`raise_if_stopped`). Elsewhere it ends the job at once (KeyboardInterrupt), as
  Ctrl-C always did. The loop also checks between requests that the process named in
  $LOOKAHEAD_PARENT_PID is still its parent (:func:`parent_gone`): the same stop where no
  parent-death signal exists.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The wrapper's process id, in the environment of every child it starts.
PARENT_ENV = "LOOKAHEAD_PARENT_PID"
#: Set when the job was asked to stop (a signal, or its wrapper is gone).
STOP = threading.Event()
#: prctl's option (linux/prctl.h).
PR_SET_PDEATHSIG = 1

_state: dict[str, Any] = {"draining": False, "signalled": False, "parent": None}


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _die_with_parent() -> None:
    """In a child between fork and exec: SIGTERM when the parent dies (Linux only)."""
    libc = _libc()
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def parent_gone() -> bool:
    """True when this job was started by a wrapper (PARENT_ENV, taken by
    install_stop_handlers) that has exited: the child is then re-parented, so its parent
    id is no longer the wrapper's."""
    expected = _state["parent"]
    return bool(expected) and str(os.getppid()) != expected


def child_options(env: dict[str, str] | None = None) -> dict[str, Any]:
    """Popen options that make a process this wrapper's child: SIGTERM when the wrapper
    dies (parent-death signal), and PARENT_ENV naming the wrapper in its environment."""
    return {"env": {**(env if env is not None else os.environ), PARENT_ENV: str(os.getpid())}, "preexec_fn": _die_with_parent}


@contextmanager
def forwarding_signals(proc: subprocess.Popen) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM received by the wrapper go to ``proc``
    (the wrapper then waits for the child to write what it has and stop). A terminal's
    Ctrl-C reaches the child directly too (same process group): the job takes a second
    signal as the same request to stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _frame: Any) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    saved = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def run_child(cmd: list[str], env: dict[str, str] | None = None, **popen: Any) -> int:
    """Run ``cmd`` to its end as this wrapper's child (child_options, forwarding_signals)
    and return its exit status."""
    with subprocess.Popen(cmd, **child_options(env), **popen) as proc, forwarding_signals(proc):
        return proc.wait()


def _on_signal(signum: int, _frame: Any) -> None:
    STOP.set()
    if _state["signalled"]:  # the same request again (a terminal's Ctrl-C and the wrapper's)
        return
    _state["signalled"] = True
    if not _state["draining"]:
        raise KeyboardInterrupt


@contextmanager
def stop_handlers() -> Iterator[None]:
    """While a job runs, SIGTERM is taken as SIGINT: both stop it as described above
    (main thread only; the previous handlers are restored after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    install_stop_handlers()
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def install_stop_handlers() -> None:
    """Install the job's handlers of SIGINT and SIGTERM (stop_handlers restores them)."""
    if threading.current_thread() is not threading.main_thread():
        return
    STOP.clear()
    _state["signalled"] = False
    # the wrapper is this process's parent, not its workers' (Ray's, a tokenizer's): taken
    # out of the environment they inherit
    _state["parent"] = os.environ.pop(PARENT_ENV, None)
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _on_signal)
    if parent_gone():  # the wrapper died before this process could notice
        STOP.set()


@contextmanager
def draining() -> Iterator[None]:
    """While the query loop runs, a signal sets STOP instead of interrupting: the loop
    then writes what is in flight and calls raise_if_stopped."""
    before = _state["draining"]
    _state["draining"] = True
    try:
        yield
    finally:
        _state["draining"] = before


def should_stop() -> bool:
    """Whether the query loop must ask nothing more (a signal, or the wrapper is gone)."""
    if not STOP.is_set() and parent_gone():
        STOP.set()
    return STOP.is_set()


def raise_if_stopped() -> None:
    """End the job as an interrupt (lookahead.guard: 'finished answers are saved')."""
    if STOP.is_set():
        raise KeyboardInterrupt
