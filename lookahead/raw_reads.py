"""What a build read from the shared raw answer files, and whether a later write touches it.

raw_dir is an append-only log that several studies may share (docs/scaling.md): the
demo's contaminated and early-cutoff studies, a study and its re-run under another
cutoff, two teams on one cache. A whole-file fingerprint made every study's result stale
as soon as any sibling appended a line it never reads. So a build records, for every
``*.jsonl`` file under raw_dir (answers, shards and failure lines), what it read: the
file's length, its inode and modification time, and the sha256 of those bytes
(:func:`record`, stored in ``build_identity.raw_reads``). The result stays current while
(:func:`changes`):

- every recorded file still begins with exactly the bytes that were read (a file cut
  short, rewritten or edited in place is a change, whoever touched it); and
- no line written since, appended to a recorded file or in a new file, carries a key the
  study asks for (``int_expected_keys``): a new answer, a new failure line or a second
  line for one of its keys could change its tables, a line for another study's key
  cannot.

Cost: a file whose length, inode and modification time are those recorded is not read
at all, so a report over an unchanged cache reads nothing. A file that grew is hashed up
to the recorded length (one sequential read, no parsing) and only its appended tail is
parsed, and of each tail line only the ``key`` field (the first field of every line the
jobs write, lookahead.cache).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from lookahead.cache.files import files_matching

#: The files the build reads under raw_dir: every task's answers and failure lines, in
#: the single-process file and the workers' shards (lookahead.cache.files.SHARD_PATTERN).
RAW_GLOB = "**/*.jsonl"
#: Bytes read and hashed at a time.
BLOCK = 1 << 22
#: The key fields of a raw line. A quote inside a JSON string is always escaped, so an
#: unescaped `"key":"` is a field name, never text inside a prompt or an answer.
_KEY_FIELD = re.compile(rb'"key"\s*:\s*"([^"\\]{1,200})"')


@dataclass(frozen=True)
class FileRead:
    """One raw file as a build read it: path relative to raw_dir, bytes read, and what
    identifies the bytes (inode and mtime for the no-read fast path, sha256 for the rest)."""

    path: str
    length: int
    inode: int
    mtime_ns: int
    sha256: str


def _files(raw_dir: Path) -> list[Path]:
    return [p for p in files_matching(raw_dir, RAW_GLOB) if p.is_file()]


def _digest(path: Path, length: int) -> str:
    """sha256 of the first ``length`` bytes of ``path`` ('' when the file is shorter)."""
    h = hashlib.sha256()
    left = length
    with open(path, "rb") as fh:
        while left > 0:
            block = fh.read(min(BLOCK, left))
            if not block:
                return ""
            h.update(block)
            left -= len(block)
    return h.hexdigest()


def record(raw_dir: str | os.PathLike[str], whole_file_digest: Callable[[Path], str] | None = None) -> list[FileRead]:
    """What a build reads now: every raw file under ``raw_dir`` as it is.
    ``whole_file_digest`` (hex sha256 of a whole file) lets the build reuse the digests
    build_identity has just taken for its per-task columns (lookahead.identity's cached
    fingerprint), so each file is read once per build."""
    root = Path(raw_dir)
    out = []
    for f in _files(root):
        st = f.stat()
        digest = whole_file_digest(f) if whole_file_digest else _digest(f, st.st_size)
        if f.stat().st_size != st.st_size:  # appended meanwhile: the bytes of the recorded length
            digest = _digest(f, st.st_size)
        out.append(FileRead(f.relative_to(root).as_posix(), st.st_size, st.st_ino, st.st_mtime_ns, digest))
    return out


def to_json(reads: Iterable[FileRead]) -> str:
    return json.dumps([asdict(r) for r in reads], separators=(",", ":"))


def from_json(text: str | None) -> list[FileRead] | None:
    """The recorded reads, or None for a database built before they were recorded."""
    if not text:
        return None
    try:
        return [FileRead(**item) for item in json.loads(text)]
    except (ValueError, TypeError):
        return None


def _inside(root: Path, rel: str) -> Path | None:
    """``root / rel`` when ``rel`` is a relative path that stays inside ``root`` once
    resolved, else None."""
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts or not rel:
        return None
    f = root / p
    try:
        return f if f.resolve().is_relative_to(root.resolve()) else None
    except (OSError, RuntimeError):
        return None


def _tail_keys(path: Path, start: int) -> set[str]:
    """The key of every line from byte ``start`` on (a torn last line included: a line
    the jobs will complete or move aside)."""
    keys: set[str] = set()
    with open(path, "rb") as fh:
        fh.seek(start)
        carry = b""
        while block := fh.read(BLOCK):
            lines = (carry + block).split(b"\n")
            carry = lines.pop()
            for line in lines:
                keys.update(m.decode("ascii", "replace") for m in _KEY_FIELD.findall(line))
        keys.update(m.decode("ascii", "replace") for m in _KEY_FIELD.findall(carry))
    return keys


def _what(rel: str) -> str:
    """What a raw file holds, for the message: ``shards/x/mink.jsonl`` -> 'the mink
    answers', ``forecast.failures.jsonl`` -> 'the forecast failure lines'."""
    name = rel.rsplit("/", 1)[-1].removesuffix(".jsonl")
    if name.endswith(".failures"):
        return f"the {name.removesuffix('.failures')} failure lines"
    return f"the {name} answers"


def changes(raw_dir: str | os.PathLike[str], recorded: list[FileRead], reads_keys: Callable[[set[str]], set[str]]) -> list[str]:
    """Why a result built from ``recorded`` may no longer be current ([] when it is).

    ``reads_keys(keys)`` returns those of ``keys`` the study asks for (its database's
    int_expected_keys). Each reason names the task and the file, relative to raw_dir, as
    a noun phrase ("the mink answers (mink.jsonl rewritten)", "the recall failure lines
    (...)") that the caller follows with "changed since dbt build".

    The recorded paths are read back from the database, so they are data: one that is
    not a plain relative path inside raw_dir (absolute, `..`, or resolving out of it
    through a link) is reported as a change and never opened."""
    root = Path(raw_dir)
    reasons: list[str] = []
    tails: dict[str, set[str]] = {}
    known = {r.path: r for r in recorded}
    for r in recorded:
        f = _inside(root, r.path)
        if f is None:
            reasons.append(f"the raw answers ({r.path!r} recorded, not a path inside raw_dir)")
            continue
        try:
            st = f.stat()
        except OSError:
            reasons.append(f"{_what(r.path)} ({r.path} removed)")
            continue
        if (st.st_size, st.st_ino, st.st_mtime_ns) == (r.length, r.inode, r.mtime_ns):
            continue
        if st.st_size < r.length or _digest(f, r.length) != r.sha256:
            reasons.append(f"{_what(r.path)} ({r.path} rewritten)")
        elif st.st_size > r.length:
            tails[r.path] = _tail_keys(f, r.length)
    for f in _files(root):
        rel = f.relative_to(root).as_posix()
        if rel in known:
            continue
        if _inside(root, rel) is None:  # a new file linked out of raw_dir: named, not read
            reasons.append(f"the raw answers ({rel!r} links out of raw_dir)")
        else:
            tails[rel] = _tail_keys(f, 0)
    wanted = set().union(*tails.values()) if tails else set()
    hit = reads_keys(wanted) if wanted else set()
    for rel, keys in tails.items():
        if n := len(keys & hit):
            reasons.append(f"{_what(rel)} ({n} new line{'s' if n != 1 else ''} in {rel} for keys this study reads)")
    return reasons
