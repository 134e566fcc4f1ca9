"""The summary's key lookup without a Python string a key (lookahead.cache.KeyPositions)
and its compact finished_at (FinishedTimes) answer as the dict and list they replace."""

from __future__ import annotations

import hashlib
import random

from lookahead.cache import FinishedTimes, KeyPositions, utc_now, wins_over


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
    values = [utc_now(), None, "2021-01-01", 12, "2021-06-01T00:00:00.000000+00:00",
              "2021-06-01T00:00:00.000000+01:00", "2021-06-01T00:00:00+00:00", "9999-12-31T23:59:59.999999+00:00"]
    times = FinishedTimes(len(values))
    for i, v in enumerate(values):
        times[i] = v
    assert [times[i] for i in range(len(values))] == values
    times[0] = None
    assert times[0] is None
    for a in values:  # wins_over reads the same text back
        for i, b in enumerate(values[1:], 1):
            assert wins_over({"finished_at": a}, {"finished_at": times[i]}) == wins_over({"finished_at": a},
                                                                                        {"finished_at": b})
