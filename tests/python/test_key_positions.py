"""The summary's key lookup without a Python string a key (lookahead.cache.index.KeyPositions)
and its compact finished_at (FinishedTimes) answer as the dict and list they replace."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from lookahead.cache.files import utc_now
from lookahead.cache.index import KeyIndex, KeyPositions
from lookahead.cache.lookup import FinishedTimes, wins_over


def test_key_positions_equal_a_dict_of_first_positions() -> None:
    rng = random.Random(3)
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(3000)]
    for _ in range(200):  # keys asked twice, and keys of another form (also twice)
        keys[rng.randrange(len(keys))] = keys[rng.randrange(len(keys))]
    keys[10], keys[20], keys[30] = "plain-key", "plain-key", "ABC" + keys[0][3:]
    KeyPositions.SLICE = 257  # slice edges inside the keys
    try:
        positions = KeyPositions(keys)
    finally:
        KeyPositions.SLICE = 65_536
    first: dict[str, int] = {}
    again = []
    for i, k in enumerate(keys):
        if k in first:
            again.append((i, first[k]))
        first.setdefault(k, i)
    assert {k: positions[k] for k in first} == first
    assert sorted(positions.duplicates) == sorted(again) and len(positions) == len(first)
    assert set(positions) == set(first)
    for absent in ("0" * 64, keys[1].upper(), keys[1][:63], "", "missing"):
        assert positions.get(absent) is None and absent not in positions


def test_key_positions_with_a_shared_prefix() -> None:
    """Two keys whose first 8 bytes agree are told apart by the rest."""
    a = "ab" * 8 + "0" * 48
    b = "ab" * 8 + "f" * 48
    c = "ab" * 8 + "7" * 48
    positions = KeyPositions([b, a, "1" * 64])
    assert (positions.get(a), positions.get(b), positions.get(c)) == (1, 0, None)


def test_finished_times_give_back_each_value_and_order_as_text() -> None:
    values = [
        utc_now(),
        None,
        "2021-01-01",
        12,
        "2021-06-01T00:00:00.000000+00:00",
        "2021-06-01T00:00:00.000000+01:00",
        "2021-06-01T00:00:00+00:00",
        "9999-12-31T23:59:59.999999+00:00",
    ]
    times = FinishedTimes(len(values))
    for i, v in enumerate(values):
        times[i] = v
    assert [times[i] for i in range(len(values))] == values
    times[0] = None
    assert times[0] is None
    for a in values:  # wins_over reads the same text back
        for i, b in enumerate(values[1:], 1):
            assert wins_over({"finished_at": a}, {"finished_at": times[i]}) == wins_over({"finished_at": a}, {"finished_at": b})


def test_key_index_answers_as_a_dict_across_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    """RawStore's key index (lookahead.cache.index.KeyIndex): every key added, digest or not,
    reads back its value after the recent keys were folded into the sorted block."""
    monkeypatch.setattr(KeyIndex, "FOLD_AT", 50)
    rng = random.Random(5)
    index, expected = KeyIndex(), {}
    for i in range(1200):
        key = hashlib.sha256(str(i).encode()).hexdigest() if i % 17 else f"key-{i}"
        value = rng.randrange(-(2**63), 2**63)
        index.add(key, value)
        expected[key] = value
        if i % 97 == 0:
            assert {k: index[k] for k in expected} == expected
    assert {k: index[k] for k in expected} == expected and len(index) == len(expected)
    assert index.keys() == expected.keys() and len(index._recent) < 1200 // 4  # folded
    assert index.get("f" * 64) is None and "F" * 64 not in index and "key-1" not in index
    with pytest.raises(ValueError):
        index[next(iter(expected))] = 1


def test_raw_store_index_holds_a_digest_key_and_its_ident(tmp_path: Path) -> None:
    """A store reads digest keys back into its index and answers has_answer by ident."""
    from lookahead.cache.lookup import ident_of
    from lookahead.cache.store import RawStore
    from lookahead.keys import query_key

    path = tmp_path / "forecast.jsonl"
    with RawStore(path) as store:
        for i in range(30):
            text = f"prompt {i}"
            rec = {
                "key": query_key("forecast", "m", f"r{i}", text, {"t": 0}),
                "task": "forecast",
                "backend": "openai",
                "model_id": "m",
                "row_id": f"r{i}",
                "entity_id": None,
                "target_date": None,
                "prompt": text,
                "query_text": text,
                "params": {"t": 0},
                "response_text": "up",
                "top_logprobs": [{"token_id": None, "token": "up", "logprob": -0.1}],
                "prompt_logprobs": None,
                "samples": None,
                "approximated": False,
                "first_token_prob": 0.9,
                "stated_confidence": None,
                "started_at": utc_now(),
                "finished_at": utc_now(),
            }
            store.append(rec)
    with RawStore(path) as store:
        lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
        assert isinstance(store.idents, KeyIndex) and len(store) == 30
        assert all(store.has_answer(r["key"], ident_of(r)) for r in lines)
        assert not store.has_answer(lines[0]["key"], ident_of({**lines[0], "row_id": "r9"}))
        assert store.keys == {r["key"] for r in lines}


def test_key_index_get_many_equals_get(monkeypatch: pytest.MonkeyPatch) -> None:
    """The slice lookup answers as one lookup a key: folded, recent, other-form, absent
    keys and keys sharing their first 8 bytes."""
    monkeypatch.setattr(KeyIndex, "FOLD_AT", 40)
    index = KeyIndex()
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(300)]
    shared = ["ab" * 8 + c * 48 for c in "0379f"]
    for i, key in enumerate(keys[:200] + shared[:3] + ["plain-a", "plain-b"]):
        index.add(key, i * 7 - 500)
    asked = keys + shared + ["plain-a", "plain-c", "", "AB" * 32] + keys[::-1]
    assert index.get_many(asked) == [index.get(k) for k in asked]
    assert sum(v is not None for v in index.get_many(asked)) == 200 * 2 + 3 + 1
    assert KeyIndex().get_many(keys[:5]) == [None] * 5
