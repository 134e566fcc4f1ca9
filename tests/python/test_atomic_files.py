"""Crash-safe files (lookahead.cache): a file written to a temporary path and renamed
(a writer that raises leaves the old file), and the torn-tail repair of a raw file, which
reads back from its end a block at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    """The file is written to a temporary path and renamed: a writer that raises halfway
    leaves the old file as it was and no temporary file behind."""
    from lookahead.cache.atomic import atomic_file, atomic_write_text

    path = tmp_path / "f.txt"
    atomic_write_text(path, "old")
    with pytest.raises(RuntimeError), atomic_file(path) as fh:
        fh.write(b"new, half")
        raise RuntimeError("killed halfway")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


@pytest.mark.parametrize("block", [3, 7, 64, 1 << 20])
def test_torn_tail_repair_reads_back_from_the_end_in_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """The repair reads only the last line, backwards a block at a time (a study's raw file
    is not read whole to look at its end): whatever the block size, a torn last line is cut
    at its start and moved aside, a whole last line without its newline gets its newline,
    and a whole file is left as it is."""
    from lookahead.cache import files as cache

    monkeypatch.setattr(cache, "TAIL_BLOCK", block)
    lines = [json.dumps({"key": f"k{i}", "response_text": "up" * i}) + "\n" for i in range(5)]
    path = tmp_path / "forecast.jsonl"
    path.write_text("".join(lines) + '{"key": "k5", "resp')
    assert cache.repair_torn_tail(path) == len('{"key": "k5", "resp')
    assert path.read_text() == "".join(lines)
    assert [p.read_text() for p in tmp_path.glob("forecast.jsonl.torn-*")] == ['{"key": "k5", "resp']
    path.write_text("".join(lines) + lines[0].rstrip("\n"))
    assert cache.repair_torn_tail(path) == 0 and path.read_text() == "".join(lines) + lines[0]
    assert cache.repair_torn_tail(path) == 0 and path.read_text() == "".join(lines) + lines[0]
    path.write_text('{"key": "only", "torn')  # the only line, torn: the file is cut to nothing
    assert cache.repair_torn_tail(path) == len('{"key": "only", "torn') and path.read_text() == ""
