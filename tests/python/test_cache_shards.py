"""The sharded cache: every <task>.jsonl under raw_dir is one cache, read as a union with
one line per key, by the jobs (lookahead.cache) and by dbt's staging models alike."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dbt_runner import run_dbt
from fixture_study import write_fixture_study

from lookahead.cache.files import SHARD_PATTERN, files_matching, shard_files
from lookahead.cache.locks import try_lock
from lookahead.cache.lookup import load_cache
from lookahead.cache.store import REQUIRED_FIELDS, RawStore
from lookahead.identity import cache_fingerprint, fingerprint

ROOT = Path(__file__).resolve().parents[2]


def rec(key: str, finished: str, **kw) -> dict:
    r = {f: None for f in REQUIRED_FIELDS}
    r.update(
        key=key,
        task="recall",
        approximated=False,
        params={"top_logprobs": 20},
        finished_at=finished,
        top_logprobs=[{"token_id": 1, "token": "up", "logprob": -0.1}],
    )
    r.update(kw)
    return r


def write(path: Path, *records: dict, tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in records) + tail)


class Listing:
    """What os.scandir returns (an iterator and a context manager), over entries already read."""

    def __init__(self, entries):
        self._it = iter(entries)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def close(self):
        pass


def test_a_shard_folder_removed_while_the_shards_are_listed_is_skipped(tmp_path, monkeypatch):
    """A writer that asked nothing removes its shard folder when it stops (RawStore.close)
    while another job lists the shards and the plans: here the folder goes right after
    shards/ was listed, before it is opened. The listing skips it; before, the walk raised
    FileNotFoundError and the waiting job stopped with it (seen once in the suite)."""
    raw = tmp_path / "raw"
    write(raw / "shards/h-0/recall.jsonl", rec("a", "2026-01-01T00:00:00.000000+00:00"))
    (raw / "shards/h-0/recall.jsonl.plan").write_text("")
    gone = raw / "shards/study-three-1"
    gone.mkdir()
    real = os.scandir

    def scandir(path="."):
        it = real(path)
        if Path(path) == raw / "shards" and gone.exists():
            with it:
                entries = list(it)
            gone.rmdir()  # listed, then gone
            return Listing(entries)
        return it

    monkeypatch.setattr(os, "scandir", scandir)
    assert shard_files(raw, "recall") == [raw / "shards/h-0/recall.jsonl"]
    gone.mkdir()
    assert files_matching(raw, "**/recall.jsonl.plan") == [raw / "shards/h-0/recall.jsonl.plan"]
    assert not gone.exists()


def test_a_shard_file_removed_after_it_was_listed_reads_as_empty(tmp_path, monkeypatch):
    """The same removal a moment later: the shard's file was listed, then removed before
    it was read. A job's look at the other shards (RawStore.refresh) and load_cache read
    it as empty instead of stopping on FileNotFoundError."""
    import lookahead.cache.lookup as lookup
    import lookahead.cache.store as store_module

    raw = tmp_path / "raw"
    write(raw / "shards/h-0/recall.jsonl", rec("a", "2026-01-01T00:00:00.000000+00:00"))
    listed = shard_files

    def with_a_vanished_shard(root, task):
        return sorted([*listed(root, task), Path(root) / "shards/study-three-1" / f"{task}.jsonl"], key=str)

    with RawStore(raw / "recall.jsonl") as store:
        monkeypatch.setattr(store_module, "shard_files", with_a_vanished_shard)
        monkeypatch.setattr(lookup, "shard_files", with_a_vanished_shard)
        write(raw / "shards/h-1/recall.jsonl", rec("b", "2026-01-02T00:00:00.000000+00:00"))
        assert store.refresh() == 1
        assert set(lookup.load_cache(raw, "recall")) == {"a", "b"}


def test_union_of_shards_one_line_per_key_first_written_wins(tmp_path):
    raw = tmp_path / "raw"
    write(raw / "recall.jsonl", rec("a", "2026-01-02T00:00:00.000000+00:00", response_text="late"))
    write(
        raw / "shards/h-0/recall.jsonl",
        rec("a", "2026-01-01T00:00:00.000000+00:00", response_text="early"),
        rec("b", "2026-01-03T00:00:00.000000+00:00"),
    )
    write(raw / "shards/h-1/recall.jsonl", rec("c", "2026-01-03T00:00:00.000000+00:00"))
    write(raw / "recall.failures.jsonl", {"key": "zz"})  # never read as an answer
    assert [p.relative_to(raw).as_posix() for p in shard_files(raw, "recall")] == [
        "recall.jsonl",
        "shards/h-0/recall.jsonl",
        "shards/h-1/recall.jsonl",
    ]
    got = load_cache(raw, "recall")
    assert sorted(got) == ["a", "b", "c"] and got["a"]["response_text"] == "early"
    with RawStore(raw / "recall.jsonl") as store:  # the single-process job sees every shard
        assert store.keys == {"a", "b", "c"} and store.duplicates == 1
        assert store.load({"a", "c"})["a"]["response_text"] == "early"


def test_a_store_sees_sibling_answers_as_written_and_skips_an_unfinished_line(tmp_path):
    raw = tmp_path / "raw"
    with RawStore(raw / "shards/h-0/recall.jsonl", root=raw) as a, RawStore(raw / "shards/h-1/recall.jsonl", root=raw) as b:
        b.append(rec("k1", "2026-01-01T00:00:00.000000+00:00"))
        assert "k1" not in a and a.refresh() == 1 and "k1" in a
        with open(b.path, "a") as fh:  # a writer halfway through its next line
            fh.write('{"key": "k2", "task": "rec')
        assert a.refresh() == 0 and "k2" not in a
        assert set(load_cache(raw, "recall")) == {"k1"}
        a.append(rec("k3", "2026-01-01T00:00:01.000000+00:00"))
        assert a.refresh() == 0  # its own line is not counted twice
        assert a.duplicates == 0


def test_torn_tail_of_an_idle_shard_is_repaired_a_busy_one_is_left_alone(tmp_path):
    raw = tmp_path / "raw"
    shard = raw / "shards/h-0/recall.jsonl"
    write(shard, rec("a", "2026-01-01T00:00:00.000000+00:00"), tail='{"key": "torn')
    lock = try_lock(shard)  # a live writer holds it
    with RawStore(raw / "recall.jsonl") as store:
        assert store.repaired_bytes == 0 and store.keys == {"a"}
    assert shard.read_text().endswith('"torn')
    lock.close()  # the writer died: its lock went with it
    with RawStore(raw / "recall.jsonl") as store:
        assert store.repaired_bytes == len('{"key": "torn') and store.keys == {"a"}
    assert shard.read_text().endswith("\n")
    assert list(shard.parent.glob("recall.jsonl.torn-*"))


def test_cache_fingerprint_is_the_file_fingerprint_until_there_are_shards(tmp_path):
    raw = tmp_path / "raw"
    assert cache_fingerprint(raw, "recall") == "missing"
    write(raw / "recall.jsonl", rec("a", "t"))
    single = cache_fingerprint(raw, "recall")
    assert single == fingerprint(raw / "recall.jsonl")  # databases built before shards stay current
    write(raw / "shards/h-0/recall.jsonl", rec("b", "t"))
    sharded = cache_fingerprint(raw, "recall")
    assert sharded.startswith("shards:") and sharded != single
    write(raw / "shards/h-0/recall.jsonl", rec("c", "t"))
    assert cache_fingerprint(raw, "recall") != sharded


def test_dbt_sources_read_the_same_glob():
    """models/staging/_sources.yml states the shard glob for dbt; it must be lookahead.cache's."""
    sources = yaml.safe_load((ROOT / "models/staging/_sources.yml").read_text())
    locations = {s["name"]: s["meta"]["external_location"] for s in sources["sources"] if s["name"].startswith("raw")}
    assert "/" + SHARD_PATTERN.format(task="${name}") + "'" in locations["raw"]
    assert "/" + SHARD_PATTERN.format(task="${name}.failures") + "'" in locations["raw_failures"]


def source_relation(source: str, raw: Path, task: str) -> str:
    """The raw source's relation as dbt renders it (models/staging/_sources.yml) for ``raw`` and ``task``."""
    sources = yaml.safe_load((ROOT / "models/staging/_sources.yml").read_text())
    loc = next(s["meta"]["external_location"] for s in sources["sources"] if s["name"] == source)
    return loc.replace("getvariable('lookahead_study').raw_dir", "'" + str(raw).replace("'", "''") + "'").replace("${name}", task)


def test_the_raw_source_glob_reads_every_shard_and_nothing_else(tmp_path):
    """dbt's raw sources, rendered as dbt renders them, run in DuckDB over a sharded cache
    (fast; the full dbt comparison is in the slow tier)."""
    import duckdb

    raw = tmp_path / "raw"
    write(raw / "recall.jsonl", rec("a", "2026-01-02T00:00:00.000000+00:00"))
    write(
        raw / "shards/h-0/recall.jsonl",
        rec("a", "2026-01-01T00:00:00.000000+00:00"),
        rec("b", "2026-01-01T00:00:00.000000+00:00"),
    )
    write(raw / "shards/h-0/recall.failures.jsonl", {"key": "f", "task": "recall", "reason": "timeout"})
    write(raw / "recall.jsonl.torn-20260101", {"key": "torn"})
    write(raw / "forecast.jsonl", rec("x", "t", task="forecast"))
    got = duckdb.sql(f"select key, filename from {source_relation('raw', raw, 'recall')} order by all").fetchall()
    assert got == [("a", f"{raw}/recall.jsonl"), ("a", f"{raw}/shards/h-0/recall.jsonl"), ("b", f"{raw}/shards/h-0/recall.jsonl")]
    assert [str(p) for p in shard_files(raw, "recall")] == sorted({f for _, f in got})
    failures = duckdb.sql(f"select key from {source_relation('raw_failures', raw, 'recall')}").fetchall()
    assert failures == [("f",)]


STAGING = ("stg_forecast_responses", "stg_recall_responses", "stg_mink_scores", "stg_query_failures")


@pytest.mark.slow
def test_staging_reads_the_shards_with_one_glob_as_it_reads_one_file(tmp_path):
    """The same answers, once in one file and once spread over the single-process file
    and two worker shards (plus a later duplicate of one key and a failure in a shard),
    build the same staging tables, each key once."""
    one = write_fixture_study(tmp_path / "one")
    sharded_raw = tmp_path / "sharded_raw"
    sharded_raw.mkdir()
    for task in ("forecast", "recall", "mink"):
        recs = [json.loads(x) for x in (one.raw_dir / f"{task}.jsonl").read_text().splitlines() if x.strip()]
        thirds = [recs[i::3] for i in range(3)]
        write(sharded_raw / f"{task}.jsonl", *thirds[0])
        write(sharded_raw / f"shards/h-0/{task}.jsonl", *thirds[1])
        dup = {**thirds[2][0], "finished_at": "2999-01-01T00:00:00.000000+00:00", "response_text": "LATER"}
        write(sharded_raw / f"shards/h-1/{task}.jsonl", *thirds[2], dup)
        shutil.copy(one.raw_dir / f"{task}.failures.jsonl", sharded_raw / f"shards/h-1/{task}.failures.jsonl") if (
            one.raw_dir / f"{task}.failures.jsonl"
        ).exists() else None
    failure = {
        "key": "f-1",
        "task": "recall",
        "model_id": one.backend.model_id,
        "row_id": None,
        "entity_id": "E",
        "target_date": "2021-01-01",
        "params": {},
        "reason": "timeout",
        "attempts": 3,
        "failed_at": "2026-01-01T00:00:00+00:00",
    }
    write(one.raw_dir / "recall.failures.jsonl", failure)
    write(sharded_raw / "shards/h-0/recall.failures.jsonl", failure)
    tables = {}
    for name, raw in (("one", one.raw_dir), ("sharded", sharded_raw)):
        res = run_dbt(["build", "--select", *STAGING], {**one.vars, "raw_dir": str(raw)}, tmp_path / f"{name}.duckdb")
        assert res.returncode == 0, res.output[-3000:]
        tables[name] = {t: res.table(t).sort_values("key", ignore_index=True) for t in STAGING}
    for t in STAGING:
        a, b = tables["one"][t], tables["sharded"][t]
        assert len(a) and a["key"].is_unique and b["key"].is_unique, t
        pd.testing.assert_frame_equal(a, b, check_like=True)
    assert "LATER" not in set(tables["sharded"]["stg_forecast_responses"]["response_text"])


@pytest.mark.parametrize("task", ["forecast"])
def test_single_file_cache_written_before_shards_reads_unchanged(tmp_path, task):
    """An existing single-file cache needs no migration: it is the cache's first shard."""
    raw = tmp_path / "raw"
    write(
        raw / f"{task}.jsonl",
        rec("a", "2026-01-01T00:00:00.000000+00:00", task=task, response_text="x", params={"top_logprobs": 0}),
    )
    assert shard_files(raw, task) == [raw / f"{task}.jsonl"]
    with RawStore(raw / f"{task}.jsonl") as store:
        assert store.keys == {"a"} and store.repaired_bytes == 0


def test_a_second_study_on_a_shared_raw_dir_appends_to_its_own_shard(tmp_path: Path) -> None:
    """Issue 35, item 5: while one job writes <raw_dir>/forecast.jsonl, a job of another
    study on the same raw_dir appends to shards/<its shard>/ instead of stopping; each
    sees the other's answers, and the cache reads both."""
    from lookahead.cache.lookup import load_cache
    from lookahead.cache.store import REQUIRED_FIELDS, RawStore

    def rec(key: str) -> dict:
        r = {f: None for f in REQUIRED_FIELDS}
        r.update(
            key=key,
            task="forecast",
            response_text="up",
            params={},
            approximated=False,
            finished_at=f"2021-01-01T00:00:0{key[-1]}",
        )
        return r

    raw = tmp_path / "raw"
    with RawStore(raw / "forecast.jsonl", own_shard="study-one") as one:
        assert one.path == raw / "forecast.jsonl"
        one.append(rec("k1"))
        with RawStore(raw / "forecast.jsonl", read_only_ok=True, own_shard="study-two") as two:
            assert two.read_only is None and two.path == raw / "shards" / "study-two" / "forecast.jsonl"
            assert "k1" in two  # the other study's answer is not asked again
            two.append(rec("k2"))
            assert two.failures_path.parent == two.path.parent
        assert one.refresh() == 1 and "k2" in one
        # a second job of the same study does not: it would ask the same queries again
        with RawStore(raw / "forecast.jsonl", read_only_ok=True, own_shard="study-one") as again:
            assert again.read_only and "being written by another job" in again.read_only
    assert set(load_cache(raw, "forecast")) == {"k1", "k2"}
    # a third store with nothing to write leaves no empty shard behind
    with RawStore(raw / "forecast.jsonl", own_shard="study-three") as three:
        assert three.path == raw / "forecast.jsonl"  # nobody holds the shared file now
    assert not (raw / "shards").joinpath("study-three").exists()
