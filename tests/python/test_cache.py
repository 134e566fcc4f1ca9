"""The raw JSONL store: key format, append-only writes, torn-line repair, locking."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lookahead.cache.atomic import atomic_write_text
from lookahead.cache.files import CacheError, load_records, repair_torn_tail
from lookahead.cache.lookup import ident_of, load_cache
from lookahead.cache.store import REQUIRED_FIELDS, RawStore
from lookahead.keys import fields_key, query_key


def rec(key: str, **kw) -> dict:
    """A complete recall answer (the cache refuses incomplete ones)."""
    r = {f: None for f in REQUIRED_FIELDS}
    r.update(
        key=key,
        task="recall",
        approximated=False,
        params={"top_logprobs": 20},
        top_logprobs=[{"token_id": 1, "token": "up", "logprob": -0.1}],
    )
    r.update(kw)
    return r


def test_query_key_is_sha256_of_the_contract_string():
    params = {"top_logprobs": 20, "temperature": 0, "max_tokens": 1}
    expect = hashlib.sha256(b'recall|m|E1|2021-01-05|prompt text|{"max_tokens":1,"temperature":0,"top_logprobs":20}').hexdigest()
    assert query_key("recall", "m", "E1|2021-01-05", "prompt text", params) == expect
    # parameter order does not matter; any change of prompt, params, model or row does
    assert query_key("recall", "m", "E1|2021-01-05", "prompt text", dict(reversed(params.items()))) == expect
    assert query_key("recall", "m", "E1|2021-01-05", "prompt text ", params) != expect
    assert query_key("recall", "m", "E1|2021-01-05", "prompt text", {**params, "temperature": 1}) != expect
    assert query_key("recall", "m2", "E1|2021-01-05", "prompt text", params) != expect
    assert query_key("forecast", "m", "E1|2021-01-05", "prompt text", params) != expect


def test_append_load_and_refuse_duplicates(tmp_path):
    path = tmp_path / "raw" / "recall.jsonl"
    with RawStore(path) as store:
        store.append(rec("a", response_text="up"))
        store.append(rec("b", response_text="ünïcode"))
        with pytest.raises(CacheError, match="duplicate"):
            store.append(rec("a"))
        with pytest.raises(ValueError, match="lacks field"):
            store.append({"key": "c"})
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") == 2 and text.endswith("\n")
    with RawStore(path) as store:
        assert "a" in store and "b" in store and len(store) == 2
        assert store.load({"b"})["b"]["response_text"] == "ünïcode"


def test_torn_last_line_is_moved_aside_and_cut(tmp_path):
    path = tmp_path / "mink.jsonl"
    good = json.dumps(rec("a")) + "\n" + json.dumps(rec("b")) + "\n"
    path.write_text(good + '{"key": "c", "task": "rec', encoding="utf-8")
    with RawStore(path) as store:
        assert store.repaired_bytes == len('{"key": "c", "task": "rec')
        assert store.keys == {"a", "b"}
        store.append(rec("c"))
    assert [json.loads(x)["key"] for x in path.read_text().splitlines()] == ["a", "b", "c"]
    torn = list(tmp_path.glob("mink.jsonl.torn-*"))
    assert len(torn) == 1 and torn[0].read_text() == '{"key": "c", "task": "rec'


def test_only_torn_line_and_invalid_last_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"key": "a"', encoding="utf-8")  # a single torn line
    assert repair_torn_tail(path) == len('{"key": "a"') and path.read_bytes() == b""
    path.write_text(json.dumps(rec("a")) + "\n" + '{"key": "b", bad}\n', encoding="utf-8")
    assert repair_torn_tail(path) > 0
    assert load_records(path).keys() == {"a"}
    assert repair_torn_tail(path) == 0  # idempotent on a clean file


def test_damage_before_the_last_line_is_an_error_not_a_silent_drop(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(rec("a")) + "\nnot json\n" + json.dumps(rec("b")) + "\n")
    with pytest.raises(CacheError, match="line 2"):
        RawStore(path).open()


def test_second_writer_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    with RawStore(path):
        code = (
            "import sys; from lookahead.cache.files import CacheError; from lookahead.cache.store import RawStore\n"
            f"try:\n RawStore({str(path)!r}).open()\nexcept CacheError as e:\n print(e); sys.exit(7)\n"
        )
        res = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        assert res.returncode == 7 and "another job" in res.stdout
    with RawStore(path):  # released on close
        pass


def test_atomic_writes_replace_whole_files(tmp_path):
    target = tmp_path / "d" / "summary.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in (tmp_path / "d").iterdir() if p.name.startswith(".")] == []


def test_nan_is_rejected_not_written(tmp_path):
    with RawStore(tmp_path / "r.jsonl") as store, pytest.raises(ValueError):
        store.append(rec("a", first_token_prob=float("nan")))
    assert not (tmp_path / "r.jsonl").exists()  # nothing written: the store left no empty file


@pytest.mark.parametrize(
    "task,fields,reason",
    [
        ("recall", {"top_logprobs": []}, "no top log-probs"),
        ("recall", {"top_logprobs": None}, "no top log-probs"),
        ("recall", {"top_logprobs": [{"token_id": 1, "token": "up", "logprob": None}]}, "not finite"),
        ("forecast", {"response_text": None}, "no response text"),
        ("forecast", {"response_text": "up", "top_logprobs": []}, "top log-probs"),
        ("mink", {"prompt_logprobs": []}, "no prompt log-probs"),
        (
            "mink",
            {"prompt_logprobs": [{"token_id": 1, "token": "a", "logprob": None}, {"token_id": 2, "token": "b", "logprob": None}]},
            "after the first",
        ),
        ("recall", {"params": {"n_samples": 25}, "top_logprobs": [], "samples": ["up"] * 24}, "24 of 25"),
        ("recall", {"top_logprobs": [{"token_id": 1, "token": "up", "logprob": 2.5}]}, "log-prob +2.5 is positive"),
        ("recall", {"top_logprobs": [{"token_id": 1, "token": "up", "logprob": 1e-3}]}, "is positive (above the tolerance"),
        (
            "mink",
            {"prompt_logprobs": [{"token_id": 1, "token": "a", "logprob": None}, {"token_id": 2, "token": "b", "logprob": 0.5}]},
            "at or below 0",
        ),
    ],
)
def test_incomplete_answers_are_refused_and_nothing_is_written(tmp_path, task, fields, reason):
    from lookahead.cache.store import IncompleteAnswer
    from lookahead.tasks import incomplete_reason

    r = rec("a", task=task)
    r["params"] = {"top_logprobs": 20}
    r.update(fields)
    assert reason in (incomplete_reason(r) or "")
    with RawStore(tmp_path / f"{task}.jsonl") as store, pytest.raises(IncompleteAnswer, match="not a complete answer"):
        store.append(r)
    assert not (tmp_path / f"{task}.jsonl").exists()  # nothing written: no empty file left


def test_complete_answers_pass_and_failures_go_to_their_own_file(tmp_path):
    from lookahead.cache.store import FAILURE_FIELDS
    from lookahead.tasks import incomplete_reason

    mink = rec(
        "m",
        task="mink",
        top_logprobs=None,
        params={},
        prompt_logprobs=[{"token_id": 1, "token": "a", "logprob": None}, {"token_id": 2, "token": "b", "logprob": -1.5}],
    )
    forecast_no_lp = rec(
        "f", task="forecast", response_text="", top_logprobs=[], params={"top_logprobs": 0}
    )  # logprobs not asked for: text suffices
    assert incomplete_reason(mink) is None and incomplete_reason(forecast_no_lp) is None
    path = tmp_path / "mink.jsonl"
    with RawStore(path) as store:
        store.append(mink)
        store.record_failure({f: None for f in FAILURE_FIELDS} | {"key": "x", "reason": "HTTP 500"})
    assert (tmp_path / "mink.failures.jsonl").read_text().count("\n") == 1
    with RawStore(path) as store:  # a failure is no answer: the key is asked again
        assert "m" in store and "x" not in store


def test_every_task_the_jobs_write_has_its_answer_rule_in_the_registry():
    """The task registry (lookahead.tasks) names each raw task the jobs write, with its
    answer rule; a claim-level line has none and is complete as written, and a line whose
    task is not text is checked for its log-probs alone."""
    from llm_jobs import claims_extract, forecast, mink, recall, reference
    from lookahead.tasks import ANSWER_RULES, TASKS, incomplete_reason

    assert TASKS == tuple(ANSWER_RULES) == ("forecast", "recall", "mink", "reference")
    assert {forecast.TASK, recall.TASK, mink.TASK, reference.TASK} == set(TASKS)
    assert claims_extract.TASK not in ANSWER_RULES
    assert incomplete_reason(rec("c", task=claims_extract.TASK, top_logprobs=None)) is None
    assert incomplete_reason(rec("c", task=["recall"], top_logprobs=None)) is None
    assert "not finite" in incomplete_reason(rec("c", task=None, top_logprobs=[{"logprob": None}]))
    assert incomplete_reason(rec("r", top_logprobs=None)) == "no top log-probs"  # the rule does fail


def test_a_log_prob_within_the_tolerance_is_cached_as_zero_and_counted(tmp_path):
    """Issue 35, item 4: a server that rounds a near-certain token to +1e-7 does not block
    the study; the value is read as 0 and each line says how many it had."""
    from lookahead.cache.files import iter_records
    from lookahead.tasks import LOGPROB_TOLERANCE

    r = rec("a", task="recall")
    r["params"] = {"top_logprobs": 20}
    r["top_logprobs"] = [
        {"token_id": 1, "token": "up", "logprob": 1e-7},
        {"token_id": 2, "token": "down", "logprob": -3.0},
        {"token_id": 3, "token": "x", "logprob": LOGPROB_TOLERANCE},
    ]
    with RawStore(tmp_path / "recall.jsonl") as store:
        store.append(r)
        assert store.clamped == 2
    (line,) = iter_records(tmp_path / "recall.jsonl")
    assert [t["logprob"] for t in line["top_logprobs"]] == [0.0, -3.0, 0.0] and line["clamped_logprobs"] == 2


def test_a_whole_last_line_without_its_newline_is_kept(tmp_path):
    """Issue 35, item 4: a last line that parses is whole; it gets its newline and is not
    bought again. A cut one is still moved aside."""
    path = tmp_path / "recall.jsonl"
    path.write_text(json.dumps(rec("a")) + "\n" + json.dumps(rec("b")), encoding="utf-8")
    with RawStore(path) as store:
        assert store.repaired_bytes == 0 and store.keys == {"a", "b"}
        store.append(rec("c"))
    assert [json.loads(x)["key"] for x in path.read_text().splitlines()] == ["a", "b", "c"]
    assert not list(tmp_path.glob("*.torn-*"))


def test_a_line_over_the_builds_object_limit_is_refused_naming_the_setting(tmp_path, monkeypatch):
    from lookahead.cache import store
    from lookahead.cache.store import IncompleteAnswer

    monkeypatch.setattr(store, "MAX_LINE_BYTES", 2000)
    big = rec("big", response_text="x" * 3000)
    with RawStore(tmp_path / "recall.jsonl") as store:
        store.append(rec("small"))
        with pytest.raises(IncompleteAnswer, match=r"over the 2,000 bytes .*maximum_object_size.*context_length"):
            store.append(big)
        assert "big" not in store
    assert "big" not in (tmp_path / "recall.jsonl").read_text()


def test_a_nul_filled_line_is_named_as_such(tmp_path):
    """Issue 35, item 7: NUL bytes in a line (a disk or copy error) are one line naming
    the file and line, not a codec's message."""
    path = tmp_path / "recall.jsonl"
    path.write_bytes(json.dumps(rec("a")).encode() + b"\n" + b"\x00" * 64 + b"\n" + json.dumps(rec("b")).encode() + b"\n")
    with pytest.raises(CacheError, match=r"recall.jsonl: line 2 is NUL bytes, not JSON") as err:
        RawStore(path).open()
    assert "codec" not in str(err.value) and "\n" not in str(err.value)


def _forecast_line(row_id: str, text: str, **kw) -> dict:
    """A forecast line keyed as the jobs key it: sha256 of the contract string, written
    out here (docs/CONTRACTS.md), not through lookahead.cache."""
    params = {"temperature": 0, "max_tokens": 8, "top_logprobs": 20}
    key = hashlib.sha256(
        f"forecast|m|{row_id}|{text}|{json.dumps(params, sort_keys=True, separators=(',', ':'))}".encode()
    ).hexdigest()
    return rec(
        key,
        task="forecast",
        model_id="m",
        row_id=row_id,
        query_text=text,
        prompt=text,
        params={**params, "text_truncated_to_chars": 3},
        response_text="Up.",
        **kw,
    )


def test_a_line_whose_key_and_row_were_both_rewritten_is_asked_again(tmp_path):
    """Issue 35 item 4: a line is checked against its key on read. Row r1's answer copied
    under row r2's key AND row_id agrees with r2 in every identifying field, but its query
    text is r1's, so its fields hash to another key: it is no answer to r2 (the job asks
    again, and the answer asked again is the one read back). A line the jobs wrote (params
    beside the key's, text_truncated_to_chars, included) hashes to its own key."""
    r1, r2 = _forecast_line("r1", "Headline one"), _forecast_line("r2", "Headline two")
    assert fields_key(r1) == r1["key"] and fields_key(r2) == r2["key"]
    forged = {**r1, "key": r2["key"], "row_id": "r2", "response_text": "Down."}
    assert fields_key(forged) != r2["key"]
    path = tmp_path / "forecast.jsonl"
    path.write_text(json.dumps(forged) + "\n")
    want = ident_of(r2)
    assert want[-1] is True
    with RawStore(path) as store:
        assert r2["key"] in store and not store.has_answer(r2["key"], want)
        assert store.unhashed == 1
        store.append(r2)
        assert store.has_answer(r2["key"], want)
    assert load_cache(tmp_path, "forecast", {r2["key"]: want})[r2["key"]]["response_text"] == "Up."
    for field, value in (
        ("query_text", "Headline two, edited"),
        ("params", {"temperature": 1}),
        ("model_id", "another"),
        ("query_text", None),
    ):
        assert fields_key({**r2, field: value}) != r2["key"], field
