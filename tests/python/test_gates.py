"""lookahead.gates.run_gate with the real Great Expectations on small frames: what a
passing and a failing gate return, that GX builds the batch once without hashing it, and
that the frame is freed afterwards.

Why the counts matter: GX hashes every batch under 1 GB as it builds it; validating a
batch it had already built (Batch.validate after get_batch) built and hashed it twice,
about 1.3 s per copy for one gate at 1,000,000 rows, and the hash was the build's memory
peak (BENCHMARKS.md)."""

from __future__ import annotations

import pandas as pd
import pytest

from lookahead.gates import GateFailed, run_gate

# Great Expectations is imported by the tests that reach into it (and by run_gate when a
# test calls it): at module level every xdist worker paid for it while collecting.


def _mink_frame(lap: list[float]) -> pd.DataFrame:
    n = len(lap)
    return pd.DataFrame(
        {
            "row_id": [f"r{i}" for i in range(n)],
            "n_invalid_logprobs": [0] * n,
            "lap_mink": lap,
            "mink_key": [f"k{i}" for i in range(n)],
        }
    )


def test_a_passing_gate_returns_one_row_per_expectation_and_builds_the_batch_once(monkeypatch):
    from great_expectations.execution_engine import pandas_execution_engine as engine
    from great_expectations.execution_engine.pandas_execution_engine import PandasExecutionEngine

    batches, hashes = [], []
    real_batch, real_hash = PandasExecutionEngine.get_batch_data_and_markers, engine.hash_pandas_dataframe

    def counted_batch(self, batch_spec):
        batches.append(batch_spec)
        return real_batch(self, batch_spec)

    def counted_hash(df):
        hashes.append(len(df))
        return real_hash(df)

    monkeypatch.setattr(PandasExecutionEngine, "get_batch_data_and_markers", counted_batch)
    monkeypatch.setattr(engine, "hash_pandas_dataframe", counted_hash)
    threshold = engine.HASH_THRESHOLD
    table = run_gate("gate_mink_scores", _mink_frame([0.1, 0.2, 0.3]), "mink_scores", id_column="mink_key")
    assert table["success"].all()
    assert len(table) == 3 and set(table["expectation"]) == {
        "expect_column_values_to_be_unique",
        "expect_column_values_to_be_between",
    }
    assert len(batches) == 1  # built once
    assert hashes == []  # and not fingerprinted
    assert threshold == engine.HASH_THRESHOLD  # GX's switch is restored for anyone else


def test_a_failing_gate_names_the_check_and_the_row():
    with pytest.raises(GateFailed) as err:
        run_gate("gate_mink_scores", _mink_frame([0.1, 1.5, 0.3]), "mink_scores", id_column="mink_key")
    message = str(err.value)
    assert "failed 1 of 3 checks" in message
    assert "expect_column_values_to_be_between(lap_mink)" in message and "mink_key=k1" in message


def test_the_validated_frame_is_freed_when_the_gate_returns(monkeypatch):
    """GX keeps its last context for the process; the gate must not leave its batch in it
    (it held gate_panel's frame through every model built after it)."""
    import gc
    import weakref

    import lookahead.gates as gates

    made = []
    real = gates.gate_frame

    def kept(*args, **kwargs):
        frame = real(*args, **kwargs)
        made.append(weakref.ref(frame))
        return frame

    monkeypatch.setattr(gates, "gate_frame", kept)
    run_gate("gate_mink_scores", _mink_frame([0.1, 0.2]), "mink_scores", id_column="mink_key")
    gc.collect()
    assert len(made) == 1 and made[0]() is None


def test_two_gates_at_once_leave_the_fingerprint_switch_as_they_found_it():
    """dbt runs two gates at once; the one that ends first must not turn hashing back on
    under the other, and the last one out restores GX's threshold."""
    from great_expectations.execution_engine import pandas_execution_engine as engine

    from lookahead.gates.expectations import _no_batch_fingerprint

    threshold = engine.HASH_THRESHOLD
    first, second = _no_batch_fingerprint(), _no_batch_fingerprint()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert engine.HASH_THRESHOLD == 0  # the second gate still runs without the hash
    second.__exit__(None, None, None)
    assert threshold == engine.HASH_THRESHOLD
