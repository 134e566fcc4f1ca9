"""The forecast job's summary reads only the fields it needs, a chunk at a time (issue 35:
memory bounded by what is in flight, not by the study), and writes what the whole-line
path wrote: the same line per key (only lines that agree with their key, first written
wins over every shard), the same parse, the same parquet.

The reference below is the path the summary replaced, kept here as an independent
implementation: every whole line loaded (lookahead.cache.load_cache), one dict per row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_openai_backend import server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture


def whole_line_summary(study: Path, raw: Path, rows_csv: Path) -> pd.DataFrame:
    """forecast.parquet as the whole-line path built it: load_cache with each key's
    expected ident, then one dict per query in row order."""
    from lookahead.cache import load_cache
    from lookahead.config import load_study
    from lookahead.scoring import parse_forecast

    labels = load_study(study).prompts.forecast_labels
    rows = pd.read_csv(rows_csv, dtype=str)
    lines = [json.loads(x) for p in sorted(raw.rglob("forecast.jsonl")) for x in p.read_text().splitlines()]
    key_of = {}  # row_id -> the key its query asks (from the job's own first lines)
    for rec in json.loads((raw.parent / "keys.json").read_text()):
        key_of[rec["row_id"]] = rec["key"]
    expect = {key_of[r]: ("forecast", "served-model", r, None, None, True) for r in rows["row_id"]}
    records = load_cache(raw, "forecast", expect)
    out = []
    for r in rows.itertuples():
        rec = records[key_of[r.row_id]]
        label, value = parse_forecast(rec["response_text"], labels)
        out.append(
            {
                "row_id": r.row_id,
                "entity_id": r.entity_id,
                "text_date": r.text_date,
                "target_date": r.target_date,
                "mu_hat": value,
                "forecast_label": label,
                "first_token_prob": rec.get("first_token_prob"),
                "stated_confidence": rec.get("stated_confidence"),
                "raw_key": key_of[r.row_id],
                "response_text": rec["response_text"],
            }
        )
    assert len(lines) > len(out)  # the planted lines are there
    return pd.DataFrame(out)


EARLY = "2000-01-01T00:00:00.000000+00:00"  # before any line the job writes


def plant(raw: Path, task: str, lines: list[dict[str, Any]], liar: dict[str, Any], dup: dict[str, Any]) -> None:
    """The task's file rewritten as ``lines`` after ``liar`` (a line that disagrees with its
    key, written first), and ``dup`` (a second line of a key) in another shard."""
    (raw / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [liar, *lines]))
    shard = raw / "shards" / "copied" / f"{task}.jsonl"
    shard.parent.mkdir(parents=True)
    shard.write_text(json.dumps(dup) + "\n")


def test_streamed_summary_equals_the_whole_line_path_with_planted_lines(
    server_factory: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """40 rows answered by the loopback server, then planted: a line under row 1's key whose
    row_id is another row's (disagrees with its key: never read, though written first), a
    second line of row 2's key in another shard written earlier with another answer (it
    wins, as in the build), and an answer that parses to no label (row 3). The summary,
    written in chunks of 7 rows, equals the whole-line path's frame, row for row."""
    from llm_jobs import forecast

    monkeypatch.setattr(forecast, "SUMMARY_CHUNK_ROWS", 7)  # several chunks, the last one short
    url, _ = server_factory(vary=True)
    study = write_openai_study(tmp_path, url, "s", 40)
    assert forecast.main(["--study", str(study), "--yes"]) == 0
    raw = tmp_path / "s" / "raw"
    lines = [json.loads(x) for x in (raw / "forecast.jsonl").read_text().splitlines()]
    (tmp_path / "s" / "keys.json").write_text(json.dumps([{"row_id": r["row_id"], "key": r["key"]} for r in lines]))
    by_row = {r["row_id"]: r for r in lines}

    liar = {**by_row["r1"], "row_id": "r9", "response_text": "down", "finished_at": EARLY}
    dup = {
        **by_row["r2"],
        "response_text": "down" if by_row["r2"]["response_text"] == "up" else "up",
        "first_token_prob": 0.123,
        "finished_at": EARLY,
    }
    for i, r in enumerate(lines):
        if r["row_id"] == "r3":
            lines[i] = {**r, "response_text": "no idea"}
    plant(raw, "forecast", lines, liar, dup)

    capsys.readouterr()
    assert forecast.main(["--study", str(study), "--yes"]) == 0
    out = capsys.readouterr().out
    assert "to query: 0" in out and "parse rate: 97.5% (39/40)" in out
    got = pd.read_parquet(tmp_path / "s" / "out" / "forecast.parquet")
    want = whole_line_summary(study, raw, tmp_path / "s.csv")
    assert got.loc[got.row_id == "r2", "first_token_prob"].item() == 0.123  # the earlier shard line won
    assert got.loc[got.row_id == "r1", "response_text"].item() == by_row["r1"]["response_text"]
    assert got.loc[got.row_id == "r3", "forecast_label"].isna().item()
    pd.testing.assert_frame_equal(got, want.astype(got.dtypes.to_dict()), check_dtype=True)


def test_a_failed_summary_leaves_the_old_file(tmp_path: Path) -> None:
    """The parquet is written to a temporary file and renamed: a writer that raises halfway
    leaves the old file as it was and no temporary file behind."""
    import pyarrow as pa

    from lookahead.cache import atomic_parquet_writer

    schema = pa.schema([("x", pa.int64())])
    path = tmp_path / "f.parquet"
    with atomic_parquet_writer(path, schema) as w:
        w.write_table(pa.table({"x": [1, 2]}, schema=schema))
    with pytest.raises(RuntimeError), atomic_parquet_writer(path, schema) as w:
        w.write_table(pa.table({"x": [3]}, schema=schema))
        raise RuntimeError("killed halfway")
    assert pd.read_parquet(path)["x"].tolist() == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["f.parquet"]


@pytest.mark.parametrize("block", [3, 7, 64, 1 << 20])
def test_torn_tail_repair_reads_back_from_the_end_in_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """The repair reads only the last line, backwards a block at a time (a study's raw file
    is not read whole to look at its end): whatever the block size, a torn last line is cut
    at its start and moved aside, a whole last line without its newline gets its newline,
    and a whole file is left as it is."""
    from lookahead import cache

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


def test_mink_summary_reads_each_lines_lap_as_the_whole_line_path_does(
    server_factory: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The Min-K% summary computes each line's LAP as it reads it (llm_jobs.mink
    score_prompts' derived values) and keeps no line: with a line under row 1's key whose
    row_id is another row's (never read) and an earlier line of row 2's key in another
    shard (it wins), mink.parquet equals the LAPs of the lines load_cache picks."""
    from llm_jobs import mink
    from lookahead.cache import load_cache
    from lookahead.scoring import mink_lap

    url, _ = server_factory(vary=True)
    study = write_openai_study(tmp_path, url, "m", 12, lap_measure="mink")
    assert mink.main(["--study", str(study), "--yes"]) == 0
    raw = tmp_path / "m" / "raw"
    lines = [json.loads(x) for x in (raw / "mink.jsonl").read_text().splitlines()]
    by_row = {r["row_id"]: r for r in lines}
    lowered = [{**t, "logprob": None if t["logprob"] is None else t["logprob"] - 3.0} for t in by_row["r2"]["prompt_logprobs"]]
    liar = {**by_row["r1"], "row_id": "r9", "prompt_logprobs": lowered, "finished_at": EARLY}
    dup = {**by_row["r2"], "prompt_logprobs": lowered, "finished_at": EARLY}
    plant(raw, "mink", lines, liar, dup)

    capsys.readouterr()
    assert mink.main(["--study", str(study), "--yes"]) == 0
    assert "to query: 0" in capsys.readouterr().out
    got = pd.read_parquet(tmp_path / "m" / "out" / "mink.parquet").set_index("row_id")
    keys = {r["row_id"]: r["key"] for r in lines}
    records = load_cache(raw, "mink", {keys[r]: ("mink", "served-model", r, None, None, True) for r in keys})
    k, mean = got["mink_k"].iloc[0], got["mink_mean"].iloc[0]
    for row_id, key in keys.items():
        lps = [t["logprob"] for t in records[key]["prompt_logprobs"]]
        assert got.loc[row_id, "lap_mink"] == pytest.approx(mink_lap(lps, k, mean), rel=1e-12)
        assert got.loc[row_id, "n_tokens"] == len(lps) and got.loc[row_id, "raw_key"] == key
    lap_r2 = mink_lap([t["logprob"] for t in lowered], k, mean)
    assert got.loc["r2", "lap_mink"] == pytest.approx(lap_r2, rel=1e-12)  # the earlier shard line won
    assert got.loc["r1", "lap_mink"] != pytest.approx(mink_lap([t["logprob"] for t in liar["prompt_logprobs"]], k, mean))


def test_recall_summary_scores_each_line_as_the_whole_line_path_does(
    server_factory: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The recall summary scores each pair's line as it reads it (no line held): with a
    line under one pair's key whose entity is another's (never read) and an earlier line
    of a second pair's key in another shard (it wins), recall.parquet equals the scores of
    the lines load_cache picks."""
    from llm_jobs import recall
    from lookahead.cache import load_cache
    from lookahead.config import load_study
    from lookahead.scoring import recall_scores

    url, _ = server_factory(vary=True)
    study = write_openai_study(tmp_path, url, "r", 30)
    assert recall.main(["--study", str(study), "--yes"]) == 0
    raw = tmp_path / "r" / "raw"
    lines = [json.loads(x) for x in (raw / "recall.jsonl").read_text().splitlines()]
    first, second = lines[0], lines[1]
    swapped = [{**t, "logprob": t["logprob"] - 2.0 * (i % 2)} for i, t in enumerate(second["top_logprobs"])]
    liar = {**first, "entity_id": "E-other", "top_logprobs": swapped, "finished_at": EARLY}
    dup = {**second, "top_logprobs": swapped, "finished_at": EARLY}
    plant(raw, "recall", lines, liar, dup)

    capsys.readouterr()
    assert recall.main(["--study", str(study), "--yes"]) == 0
    assert "to query: 0" in capsys.readouterr().out
    got = pd.read_parquet(tmp_path / "r" / "out" / "recall.parquet").set_index("raw_key")
    labels = {k: str(v) for k, v in load_study(study).prompts.recall_labels.items()}
    records = load_cache(
        raw, "recall", {r["key"]: ("recall", "served-model", None, r["entity_id"], r["target_date"], True) for r in lines}
    )
    assert len(got) == len(lines) == len(records)
    for key, rec in records.items():
        want = recall_scores(rec, labels)
        assert got.loc[key, "lap"] == pytest.approx(want.lap, rel=1e-12, nan_ok=True)
        assert got.loc[key, "p_up"] == pytest.approx(want.p_up, rel=1e-12, nan_ok=True)
    assert records[second["key"]]["top_logprobs"] == swapped  # the earlier shard line won ...
    assert got.loc[first["key"], "entity_id"] == first["entity_id"]  # ... and the liar was never read
