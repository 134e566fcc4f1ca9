"""The gates' Great Expectations in a process of its own, beside a dbt build.

Why: a `dbt build` of this project is bound by the Python interpreter more than by its
cores. Importing Great Expectations (scipy.stats, altair and the rest of its import tree)
held the interpreter's lock about 2 s, in a background thread of the build process, while
dbt's threads waited for the lock to start and finish nodes; each gate's validation held
it again. In a process of its own the import holds no lock of the build's, and it runs at
the lowest CPU priority, so it takes the CPU time the build leaves idle rather than the SQL
nodes' time. The build process only converts each gate's columns to pandas (as before)
and sends the frame over a pipe. At 91,361 rows the build took 0.89-1.00x the time it
took with the import in a thread (median 0.96x, 8 pairs); the worker holds about 300 MiB
while it lives, and the build's peak was 1.17x (BENCHMARKS.md, "The gates' Great
Expectations in a process of its own").

The worker is started once per dbt invocation, by the build's run-start hook when the
selection runs a gate (macros/build_log.sql calls lookahead_start_gate_worker() with the
selected gate models, which lookahead.dbt_plugin registers), and it ends when the last
of those gates has been validated, so its memory is not held through the regressions. It
serves one gate at a time (dbt's two threads take turns) and keeps no state between gates:
each request carries the suite, its parameters and the frame, and the reply is the rows
lookahead.gates.expectations.expectation_rows returns.

Nothing is lost when the worker cannot serve: a gate whose worker failed to start, died,
or raised runs in the build process instead, as every gate did before, and so reports
exactly what it would have reported there (a gate's failed checks are rows of the reply,
not an exception). Outside a dbt build (the tests, a script calling
lookahead.gates.run_gate) no worker is started and gates run in the calling process."""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from lookahead.gates.expectations import expectation_rows, import_gx
from lookahead.memory import limit_malloc_arenas, release_free_memory

#: The reply that says the worker validated the frame; anything else sends the gate back
#: to the build process.
OK = "ok"
#: The import's niceness (19: the lowest priority; raising one's own niceness needs no
#: privilege).
IMPORT_NICENESS = 19


class GateWorker:
    """The build process's end of one worker: a child process and the two pipes to it,
    open until every gate it was started for has been validated."""

    def __init__(self, gates: Iterable[str]) -> None:
        self.pending = set(gates)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)  # the worker's import_gx turns GX's analytics off itself
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "lookahead.gates.worker", str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # a worker that fails is replaced by the build process
                env=env,
            )
        except BaseException:
            for fd in (to_child_w, from_child_r):
                os.close(fd)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._requests: IO[bytes] = os.fdopen(to_child_w, "wb")
        self._replies: IO[bytes] = os.fdopen(from_child_r, "rb")
        self._lock = threading.Lock()
        self.closed = False

    def expectation_rows(
        self,
        gate: str,
        make_frame: Callable[[], Any],
        suite: Mapping[str, Any],
        parameters: Mapping[str, Any],
        id_column: str | None,
    ) -> list[dict[str, Any]] | None:
        """The gate's rows from the worker, or None when the worker could not give them
        (the caller then checks in its own process, making the frame again).

        The frame is made here and dropped once sent, before the reply is awaited: while
        the worker checks its copy, this process holds none (at 1,000,000 rows the panel
        gate's frame is a few hundred MiB)."""
        if self.closed:
            return None
        request = (gate, make_frame(), dict(suite), dict(parameters), id_column)
        with self._lock:
            if self.closed:
                return None
            try:
                pickle.dump(request, self._requests, protocol=5)
                self._requests.flush()
                del request
                status, rows = pickle.load(self._replies)
            except Exception:  # the worker died or its pipe broke: no further requests
                self._close()
                with contextlib.suppress(OSError):
                    self.process.kill()
                return None
            self.pending.discard(gate)
            if not self.pending:  # the last gate of the build: the worker's memory goes
                self._close()
        return rows if status == OK else None

    def close(self) -> None:
        """Close the pipes and stop a worker still running (at exit: one still importing)."""
        with self._lock:
            self._close()
            if self.process.poll() is None:
                with contextlib.suppress(OSError):
                    self.process.terminate()

    def _close(self) -> None:
        """Close the pipes: the worker ends when its request pipe closes, and a daemon
        thread reaps it then (a process that runs many builds, `lookahead run` or a test
        session, would otherwise keep one finished child per build)."""
        if self.closed:
            return
        self.closed = True
        for stream in (self._requests, self._replies):
            with contextlib.suppress(OSError):
                stream.close()
        threading.Thread(target=self.process.wait, name="lookahead-gate-worker-reaper", daemon=True).start()


_WORKER: list[GateWorker] = []
_START = threading.Lock()


def start(gates: Iterable[str]) -> None:
    """Start this dbt invocation's worker for the named gate models (a worker left from an
    earlier invocation in the same process is closed first)."""
    with _START:
        for old in _WORKER:
            old.close()
        _WORKER.clear()
        if os.name != "posix":
            return
        try:
            worker = GateWorker(gates)
        except OSError:  # no worker: the gates run in this process
            return
        _WORKER.append(worker)
        atexit.register(worker.close)


def worker() -> GateWorker | None:
    """This process's worker while it serves."""
    return _WORKER[0] if _WORKER and not _WORKER[0].closed else None


def _import_when_idle() -> None:
    """Import Great Expectations at the lowest CPU priority (this thread only, where the
    system allows it: a thread's own niceness is Linux's). A gate waiting for the import
    leaves its own core idle for it."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), IMPORT_NICENESS)
    with contextlib.suppress(Exception):  # a failed import fails again in expectation_rows, which replies with it
        import_gx()


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """The worker's loop: import Great Expectations in the background, then validate each
    request (at normal priority, once the import is done) until the build process closes
    the pipe."""
    importing = threading.Thread(target=_import_when_idle, name="lookahead-gx-import", daemon=True)
    importing.start()
    while True:
        try:
            gate, frame, suite, parameters, id_column = pickle.load(requests)
        except EOFError:
            return
        importing.join()
        try:
            reply: tuple[str, Any] = (OK, expectation_rows(gate, frame, suite, parameters, id_column))
        except Exception as exc:  # the build process validates again and reports it there
            reply = ("error", f"{type(exc).__name__}: {exc}")
        del frame
        pickle.dump(reply, replies, protocol=5)
        replies.flush()
        release_free_memory()  # the frame's pages back to the system before the next gate


def main(argv: list[str]) -> None:
    limit_malloc_arenas()
    with (
        os.fdopen(int(argv[0]), "rb") as requests,
        os.fdopen(int(argv[1]), "wb") as replies,
        contextlib.suppress(BrokenPipeError, KeyboardInterrupt),
    ):
        serve(requests, replies)


if __name__ == "__main__":
    main(sys.argv[1:])
