"""The key index: a million cache keys held as sorted digests, not as Python strings.

Why a module of its own: a store's and a summary's memory at a million rows was mostly
their dicts of key strings (BENCHMARKS.md "Job memory at a million rows"); these
structures hold a key in 48 bytes and look a slice of keys up at once. They know nothing
of the cache's files: a key in, a number out."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

_HEX_KEY = re.compile(r"[0-9a-f]{64}")


def is_digest_key(key: Any) -> bool:
    """Whether ``key`` is a key as this project writes it: a lowercase sha256 hex digest."""
    return isinstance(key, str) and len(key) == 64 and _HEX_KEY.fullmatch(key) is not None


class SortedDigests:
    """Digest keys held as one sorted block of their 32 bytes, with numpy arrays of their
    first 8 bytes (to search) and of one int64 value each: 48 bytes a key, where a dict
    of key strings to ints took about 200. Built once from (keys, values); a key given
    twice keeps its first value, and ``again`` lists (index, first index) of the others."""

    def __init__(self, blob: bytes | bytearray, values: np.ndarray) -> None:
        digests = np.frombuffer(blob, dtype=">u8").reshape(-1, 4)
        # stable: among equal digests the first given comes first
        order = np.lexsort((digests[:, 3], digests[:, 2], digests[:, 1], digests[:, 0]))
        digests, at, values = digests[order], order, values[order]
        again = np.zeros(len(digests), dtype=bool)
        if len(digests) > 1:
            again[1:] = (digests[1:] == digests[:-1]).all(axis=1)
        self.again: list[tuple[int, int]] = []
        if again.any():
            starts = np.maximum.accumulate(np.where(again, 0, np.arange(len(digests))))
            self.again = [(int(at[k]), int(at[starts[k]])) for k in np.flatnonzero(again)]
            digests, values = digests[~again], values[~again]
        self.first = digests[:, 0].astype(np.uint64)
        self.blob = digests.tobytes()
        self.values = np.ascontiguousarray(values, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.values)

    def find(self, key: str) -> int:
        """Where the digest key ``key`` is (-1 when absent)."""
        raw = bytes.fromhex(key)
        prefix = int.from_bytes(raw[:8], "big")
        k = int(self.first.searchsorted(np.uint64(prefix)))
        while k < len(self.values) and int(self.first[k]) == prefix:  # keys sharing 8 bytes
            if self.blob[32 * k : 32 * k + 32] == raw:
                return k
            k += 1
        return -1

    def value(self, key: str, default: Any = None) -> Any:
        """The value of the digest key ``key`` (``default`` when absent)."""
        k = self.find(key)
        return default if k < 0 else int(self.values[k])

    def keys(self) -> Iterator[str]:
        for k in range(len(self.values)):
            yield self.blob[32 * k : 32 * k + 32].hex()


class KeyPositions(Mapping[str, int]):
    """key -> its first position in a sequence of keys, without a Python string a key.

    Why: a summary looks up each line's key among the study's keys; a dict of a million
    key strings was about 200 MB of a job's memory at its peak. A key as this project
    writes it (a sha256 hex digest, lookahead.keys) is held in :class:`SortedDigests`
    (48 bytes a key); a key of another form goes into a dict beside. ``duplicates`` lists
    (position, first position) of every key that appears again."""

    SLICE = 65_536

    def __init__(self, keys: Iterable[str]) -> None:
        self._other: dict[str, int] = {}
        self.duplicates: list[tuple[int, int]] = []
        blob = bytearray()  # one buffer grown in place: no list of parts joined (twice the bytes)
        at: list[np.ndarray] = []
        n = 0
        it = iter(keys)
        while chunk := list(itertools.islice(it, self.SLICE)):
            mask = [is_digest_key(k) for k in chunk]
            if all(mask):
                at.append(np.arange(n, n + len(chunk), dtype=np.int64))
                blob += bytes.fromhex("".join(chunk))
            else:
                at.append(n + np.flatnonzero(mask).astype(np.int64))
                blob += bytes.fromhex("".join(k for k, m in zip(chunk, mask, strict=False) if m))
                for i, (k, is_hex) in enumerate(zip(chunk, mask, strict=False)):
                    if not is_hex:
                        if k in self._other:
                            self.duplicates.append((n + i, self._other[k]))
                        else:
                            self._other[k] = n + i
            n += len(chunk)
        self.n = n
        positions = np.concatenate(at) if at else np.zeros(0, np.int64)
        self._digests = SortedDigests(blob, positions)
        del blob
        # SortedDigests' (index, first index) given -> the positions they stand for
        self.duplicates += [(int(positions[i]), int(positions[j])) for i, j in self._digests.again]

    def get(self, key: Any, default: Any = None) -> Any:
        if is_digest_key(key):
            return self._digests.value(key, default)
        return self._other.get(key, default)

    def __getitem__(self, key: str) -> int:
        at = self.get(key)
        if at is None:
            raise KeyError(key)
        return at

    def __len__(self) -> int:
        return len(self._digests) + len(self._other)

    def __iter__(self) -> Iterator[str]:
        yield from self._digests.keys()
        yield from self._other


class KeyIndex(MutableMapping[str, int]):
    """key -> one int (the hash of its first line's ident), for a cache of a million keys:
    the keys read so far in :class:`SortedDigests` (48 bytes a key), those added since in
    a dict that is folded into it when it grows to a quarter of it (a sort each time,
    a few in all), and keys of another form in a dict of their own.

    Why: RawStore's dict of a million key strings was about 230 MB of the forecast job's
    memory while it asked (BENCHMARKS.md "Job memory at a million rows"). A lookup costs
    a few microseconds instead of a fraction of one. Keys are added, never changed or
    removed (the cache is append-only; :meth:`lookahead.cache.store.RawStore.forget` makes a new index)."""

    FOLD_AT = 65_536

    def __init__(self) -> None:
        self._sorted = SortedDigests(b"", np.zeros(0, np.int64))
        self._recent: dict[str, int] = {}  # digest keys not yet folded in
        self._other: dict[str, int] = {}  # keys of another form

    def get(self, key: Any, default: Any = None) -> Any:
        got = self._recent.get(key)
        if got is not None:
            return got
        if is_digest_key(key):
            return self._sorted.value(key, default)
        return self._other.get(key, default)

    def get_many(self, keys: Sequence[str]) -> list[int | None]:
        """:meth:`get` of each key, the digest keys of the sorted block looked up together
        (one ``searchsorted`` for them all: a job checks a million keys a slice at a time)."""
        out: list[int | None] = [None] * len(keys)
        at: list[int] = []
        for i, key in enumerate(keys):
            got = self._recent.get(key)
            if got is not None:
                out[i] = got
            elif is_digest_key(key):
                at.append(i)
            else:
                out[i] = self._other.get(key)
        if not at or not len(self._sorted):
            return out
        asked = np.frombuffer(bytes.fromhex("".join(keys[i] for i in at)), dtype=">u8").reshape(-1, 4)
        first = self._sorted.first
        k = np.minimum(first.searchsorted(asked[:, 0].astype(np.uint64)), len(first) - 1)
        held = np.frombuffer(self._sorted.blob, dtype=">u8").reshape(-1, 4)[k]
        hit = (held == asked).all(axis=1)
        prefix = first[k] == asked[:, 0].astype(np.uint64)
        values = self._sorted.values[k]
        for j, i in enumerate(at):
            if hit[j]:
                out[i] = int(values[j])
            elif prefix[j]:  # another key shares its first 8 bytes: look along them
                out[i] = self.get(keys[i])
        return out

    def __getitem__(self, key: str) -> int:
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None

    def __setitem__(self, key: str, value: int) -> None:
        if key in self:
            raise ValueError(f"key {key} is in the index already (keys are added once)")
        self.add(key, value)

    def add(self, key: str, value: int) -> None:
        """Add a key the caller found absent (one lookup, not two: RawStore reads a million)."""
        if not is_digest_key(key):
            self._other[key] = value
            return
        self._recent[key] = value
        if len(self._recent) >= max(self.FOLD_AT, len(self._sorted) // 4):
            self._fold()

    def _fold(self) -> None:
        keys = list(self._recent)
        blob = self._sorted.blob + bytes.fromhex("".join(keys))
        values = np.concatenate([self._sorted.values, np.fromiter(self._recent.values(), np.int64, len(keys))])
        self._recent = {}
        self._sorted = SortedDigests(blob, values)

    def __delitem__(self, key: str) -> None:
        raise TypeError("a key index is append-only")

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent) + len(self._other)

    def __iter__(self) -> Iterator[str]:
        yield from self._sorted.keys()
        yield from list(self._recent)
        yield from list(self._other)
