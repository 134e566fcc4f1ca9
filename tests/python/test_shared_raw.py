"""Studies sharing one raw_dir: a result goes stale only when something it read changes.

raw_dir is an append-only log shared by studies (the demo's contaminated and early-cutoff
studies; docs/scaling.md). A build records what it read (build_identity.raw_reads,
lookahead.raw_reads); another study's lines appended afterwards leave its result current,
while a new or changed line for a key it reads makes it stale, naming the task. Every
step checks `lookahead report`'s answer and the verdict row's result_status together:
they are one answer (lookahead.identity.sync_status)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from dbt_runner import result_status, run_dbt
from fixture_study import write_fixture_study

from lookahead import raw_reads
from lookahead.config import Study, resolve
from lookahead.identity import COMPLETE
from lookahead.keys import expected_queries
from lookahead.pages.report import ReportError, write_report
from lookahead.rows import load_rows


def _line(key: str, answer: str = "up") -> bytes:
    return (json.dumps({"key": key, "task": "forecast", "response_text": answer}) + "\n").encode()


def _keys_of(*wanted: str):
    return lambda keys: keys & set(wanted)


def test_an_unchanged_cache_is_not_read(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "forecast.jsonl").write_bytes(_line("a") + _line("b"))
    recorded = raw_reads.record(raw)
    asked: list[set[str]] = []
    assert raw_reads.changes(raw, recorded, lambda keys: asked.append(keys) or set()) == []
    assert asked == []  # no tail, no new file: nothing parsed, no key looked up


def test_appends_of_other_keys_keep_a_result_current_and_its_own_keys_do_not(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    f = raw / "forecast.jsonl"
    f.write_bytes(_line("a") + _line("b"))
    recorded = raw_reads.record(raw)
    with open(f, "ab") as fh:
        fh.write(_line("sibling"))
    assert raw_reads.changes(raw, recorded, _keys_of("a", "b")) == []
    (raw / "shards" / "study-other").mkdir(parents=True)
    (raw / "shards" / "study-other" / "mink.jsonl").write_bytes(_line("other"))
    assert raw_reads.changes(raw, recorded, _keys_of("a", "b")) == []
    with open(f, "ab") as fh:
        fh.write(_line("b", "down"))
    assert raw_reads.changes(raw, recorded, _keys_of("a", "b")) == [
        "the forecast answers (1 new line in forecast.jsonl for keys this study reads)"
    ]
    (raw / "shards" / "study-other" / "mink.jsonl").write_bytes(_line("other") + _line("a"))
    assert len(raw_reads.changes(raw, recorded, _keys_of("a", "b"))) == 2


@pytest.mark.parametrize("edit", ["same length", "shorter", "removed", "failure line"])
def test_a_rewritten_file_is_a_change_whatever_its_keys(tmp_path: Path, edit: str) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    f = raw / "forecast.jsonl"
    f.write_bytes(_line("a") + _line("b"))
    (raw / "forecast.failures.jsonl").write_bytes(b"")
    recorded = raw_reads.record(raw)
    if edit == "same length":
        f.write_bytes(_line("a") + _line("b").replace(b'"up"', b'"dn"'))
        os.utime(f, ns=(1, 1))
        expect = "the forecast answers (forecast.jsonl rewritten)"
    elif edit == "shorter":
        f.write_bytes(_line("a"))
        expect = "the forecast answers (forecast.jsonl rewritten)"
    elif edit == "removed":
        f.unlink()
        expect = "the forecast answers (forecast.jsonl removed)"
    else:
        (raw / "forecast.failures.jsonl").write_bytes(_line("a"))
        expect = "the forecast failure lines (1 new line in forecast.failures.jsonl for keys this study reads)"
    assert raw_reads.changes(raw, recorded, _keys_of("a", "b")) == [expect]


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.jsonl", "shards/../../outside.jsonl", "link.jsonl"])
def test_a_recorded_path_out_of_raw_dir_is_a_change_and_is_not_read(tmp_path: Path, path: str) -> None:
    """raw_reads is read back from the database: a path in it that leaves raw_dir is
    reported, never opened (not even stat'ed through a link)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(_line("a"))
    (raw / "link.jsonl").symlink_to(outside)
    forged = [raw_reads.FileRead(path, 1, 1, 1, "0" * 64)]
    asked: list[set[str]] = []
    reasons = raw_reads.changes(raw, forged, lambda keys: asked.append(keys) or set())
    assert reasons[0] == f"the raw answers ({path!r} recorded, not a path inside raw_dir)"
    if path != "link.jsonl":  # the link, not recorded: named as new, and not read either
        assert reasons[1:] == ["the raw answers ('link.jsonl' links out of raw_dir)"]
    assert asked == []


# -- two studies, one raw_dir, alternately built and reported --------------------------------


def _report(vars_: dict[str, Any], db: Path, results: Path) -> str | None:
    """`lookahead report`'s answer: None when it wrote the report, else why it refused;
    and the verdict row says the same."""
    study = Study(vars=resolve({**vars_, "results_dir": str(results)}))
    try:
        write_report(study, db)
    except ReportError as err:
        assert result_status(db).startswith("stale: "), result_status(db)
        return str(err)
    assert result_status(db) == COMPLETE
    return None


def _sibling_mink_lines(raw: Path, vars_b: dict[str, Any]) -> bytes:
    """Study B's Min-K% lines as its jobs would write them: B asks for another measure list,
    whose zlib length A's lines lack, so B asks those rows again under the same key (a line
    is keyed by the forward pass it holds, not by the measures read from it)."""
    study = Study(vars=resolve(vars_b))
    valid, _ = load_rows(study)
    queries = {q["row_id"]: q for q in expected_queries(study, valid).to_pylist() if q["task"] == "mink"}
    out = []
    for text in (raw / "mink.jsonl").read_text().splitlines():
        line = json.loads(text)
        q = queries[line["row_id"]]
        out.append(
            json.dumps(
                {**line, "key": q["key"], "query_text": q["query_text"], "params": json.loads(q["params_json"]), "zlib_bytes": 40}
            )
        )
    return ("\n".join(out) + "\n").encode()


def test_two_studies_on_one_raw_dir_stay_current_until_their_own_keys_change(tmp_path: Path) -> None:
    fixture = write_fixture_study(tmp_path / "study", n_entities=16, n_dates=24, cutoff_index=14)
    raw = fixture.raw_dir
    a = {**fixture.vars, "study_name": "alpha", "results_dir": str(tmp_path / "ra"), "outputs_dir": str(tmp_path / "oa")}
    b = {
        **fixture.vars,
        "study_name": "beta",
        "lap_measures": ["recall", "mink", "zlib"],
        "results_dir": str(tmp_path / "rb"),
        "outputs_dir": str(tmp_path / "ob"),
    }
    db_a, db_b = tmp_path / "alpha.duckdb", tmp_path / "beta.duckdb"

    def build(vars_: dict[str, Any], db: Path) -> None:
        res = run_dbt(["build"], vars_, db)
        assert res.returncode == 0, res.output[-3000:]

    build(a, db_a)
    assert _report(a, db_a, tmp_path / "ra") is None
    # study B's jobs append Min-K% lines for the keys A reads too (the same forward pass, now
    # with the zlib length): A's answers changed, so A is stale, naming them, until rebuilt
    with open(raw / "mink.jsonl", "ab") as fh:
        fh.write(_sibling_mink_lines(raw, b))
    why = _report(a, db_a, tmp_path / "ra")
    assert why is not None and "the mink answers" in why, why
    build(a, db_a)
    assert _report(a, db_a, tmp_path / "ra") is None
    build(b, db_b)
    assert _report(b, db_b, tmp_path / "rb") is None
    assert _report(a, db_a, tmp_path / "ra") is None
    # a second line for a forecast key both studies read: both stale, the task named
    first = (raw / "forecast.jsonl").read_text().splitlines()[0]
    with open(raw / "forecast.jsonl", "a", encoding="utf-8") as fh:
        fh.write(first.replace('"finished_at": "2026-01-01', '"finished_at": "2026-02-01') + "\n")
    for vars_, db, res in ((a, db_a, "ra"), (b, db_b, "rb")):
        why = _report(vars_, db, tmp_path / res)
        assert why is not None and "the forecast answers (1 new line in forecast.jsonl" in why, why
    # the line taken back (the file as both builds read it): current again, and the
    # verdict rows say so once a report has checked
    with open(raw / "forecast.jsonl", "r+b") as fh:
        fh.truncate(fh.seek(0, os.SEEK_END) - len(first.encode()) - 1)
    for vars_, db, res in ((a, db_a, "ra"), (b, db_b, "rb")):
        assert _report(vars_, db, tmp_path / res) is None
    # an answer edited in place (same length) in the shared Min-K% file: stale, whoever's line
    data = (raw / "mink.jsonl").read_bytes()
    i = data.index(b'"logprob": -') + len(b'"logprob": -')
    (raw / "mink.jsonl").write_bytes(data[:i] + (b"1" if data[i : i + 1] != b"1" else b"2") + data[i + 1 :])
    for vars_, db, res in ((a, db_a, "ra"), (b, db_b, "rb")):
        why = _report(vars_, db, tmp_path / res)
        assert why is not None and "the mink answers (mink.jsonl rewritten)" in why, why


def test_the_early_cutoff_demo_asks_nothing_the_contaminated_demo_paid_for() -> None:
    """`make demo` runs demo/claims/demo_contaminated.yml, then
    demo/studies/contaminated_early_cutoff.yml on the same raw_dir: every key the second
    asks for is one the first asked (its file says so), so a fresh demo queries nothing
    twice and the first study's result stays current."""
    from dbt_runner import ROOT

    from lookahead.config import load_study
    from lookahead.keys import expected_keys

    first = load_study(ROOT / "demo" / "claims" / "demo_contaminated.yml")
    second = load_study(ROOT / "demo" / "studies" / "contaminated_early_cutoff.yml")
    assert first.raw_dir == second.raw_dir
    keys = [set(expected_keys(s, load_rows(s)[0])["key"].to_pylist()) for s in (first, second)]
    assert keys[1] and keys[1] <= keys[0]
