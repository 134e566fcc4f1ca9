"""The C library's heap in a long-lived process of the build: fewer malloc arenas, and
the free pages handed back to the system between pieces of work. The dbt process
(lookahead.dbt_plugin: before DuckDB starts its threads, and as each node starts) and the
gate worker (lookahead.gates.worker: after each gate) use them; both do nothing where the
C library is not glibc."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

#: glibc's mallopt parameter (malloc.h) and the value the dbt process uses.
M_ARENA_MAX = -8
ARENA_MAX = 2


def _libc() -> Any:
    """The C library when it is glibc (mallopt and malloc_trim exist), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def limit_malloc_arenas() -> bool:
    """At most two malloc arenas in this process (glibc's default: eight per core): the dbt
    process and the gate worker.

    Why: DuckDB's worker threads allocate through the C library's malloc, and each
    thread may get an arena of its own that keeps its freed memory; fewer arenas share
    that memory. The same as MALLOC_ARENA_MAX=2 in the environment, but it applies to
    every way a build runs (`dbt build`, `lookahead run`). Called before DuckDB starts
    its threads. Not measured on its own (benchmarks/HISTORY.md measures it with the trim and the
    working-set changes). Returns False where the C library is not glibc (nothing
    changes)."""
    return _LIBC is not None and bool(_LIBC.mallopt(M_ARENA_MAX, ARENA_MAX))


def release_free_memory() -> bool:
    """Hand the free pages inside malloc's heap back to the system (malloc_trim(0)).

    Why: glibc returns only the top of its heap when memory is freed; the large
    short-lived frames of a dbt Python model (pandas, pyfixest) and DuckDB's freed
    buffers leave free pages below it that stay in the process's resident memory for
    the rest of the build. Called as each node of the build starts (dbt-duckdb opens a
    cursor per node), so what one node freed is not carried into the next. It takes
    well under a millisecond when there is nothing to hand back, and memory still in
    use is untouched, so no result can change. Returns False where the C library is not
    glibc."""
    if _LIBC is None:
        return False
    _LIBC.malloc_trim(0)
    return True
