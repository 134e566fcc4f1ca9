"""The dbt Python models read only the panel columns they use (lookahead.stats.panel_io):
every result from the projected panel equals the result from the whole panel, for the
protocol's regressions, the verdict and the paper tables, including a single-entity
panel (Newey-West reads the row order columns) and a moderator (Table III)."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pandas as pd
import pytest

from lookahead.config import default_study_path, read_study_file
from lookahead.paper.dbt_entry import bootstrap_frame, panel_columns, paper_tables_frame
from lookahead.paper.synthetic import make_panel
from lookahead.stats.panel_io import read_columns
from lookahead.stats.protocol import StatsSections, protocol_columns, run_protocol
from lookahead.stats.verdict import VERDICT_COLUMNS, verdict_frame


def _panel(n_rows: int, n_entities: int, seed: int, sample: str) -> pd.DataFrame:
    df = make_panel(n_rows=n_rows, n_entities=n_entities, n_dates=40, seed=seed, sample=sample)
    rng = np.random.default_rng(seed)
    p_up = rng.uniform(0, 0.6, n_rows)
    p_down = rng.uniform(0, 0.4, n_rows)
    df["ud"] = p_up - p_down
    df["p_up"], df["p_down"] = p_up, p_down
    df["high_lap"] = (df["lap"] > df["lap"].median()).astype(int)
    df["text_date"] = df["target_date"] - pd.Timedelta(days=1)
    df["up_censored"] = df["down_censored"] = df["approximated"] = False
    # string columns the statistics never read (the panel has several; they dominate its memory)
    df["entity_name"] = "Entity " + df["entity_id"]
    df["forecast_key"] = [f"k{i:064d}" for i in range(n_rows)]
    return df


def _settings(**overrides) -> pd.DataFrame:
    study = {**read_study_file(default_study_path()), "bootstrap_draws": 30, **overrides}
    return pd.DataFrame({"settings_json": [json.dumps(study, default=str)]})


def _assert_same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_exact=True)


@pytest.mark.parametrize(
    "n_entities,overrides",
    [
        (30, {}),
        (1, {"cluster": "entity"}),  # one entity: Newey-West order columns
        (30, {"cluster": "date", "paper_cluster": "entity", "moderator_column": "small", "extra_columns": ["small"]}),
    ],
)
def test_projected_panel_gives_the_whole_panel_results(n_entities, overrides):
    pre, post = _panel(600, n_entities, 1, "pre"), _panel(300, n_entities, 2, "post")
    con = duckdb.connect()
    con.register("pre_df", pre)
    con.register("post_df", post)
    con.execute("create table panel_pre as select * from pre_df")
    con.execute("create table panel_post as select * from post_df")
    whole = {s: con.table(f"panel_{s}").df() for s in ("pre", "post")}
    settings = _settings(**overrides)
    stats = StatsSections.from_frame(settings)

    part = {s: read_columns(con.table(f"panel_{s}"), protocol_columns(stats)) for s in ("pre", "post")}
    assert "entity_name" not in part["pre"] and "forecast_key" not in part["pre"]
    res_whole = run_protocol(whole["pre"], whole["post"], stats)
    res_part = run_protocol(part["pre"], part["post"], stats)
    _assert_same(res_whole, res_part)
    assert res_part["estimate"].notna().any()
    if n_entities == 1:
        assert res_part["vcov"].str.startswith("NW").all()

    v = {s: read_columns(con.table(f"panel_{s}"), VERDICT_COLUMNS) for s in ("pre", "post")}
    _assert_same(
        verdict_frame(res_whole, whole["pre"], whole["post"], stats), verdict_frame(res_whole, v["pre"], v["post"], stats)
    )

    cols = panel_columns(settings)
    p = {s: read_columns(con.table(f"panel_{s}"), cols) for s in ("pre", "post")}
    boot_whole = bootstrap_frame(settings, whole["pre"], whole["post"])
    boot_part = bootstrap_frame(settings, p["pre"], p["post"])
    _assert_same(boot_whole, boot_part)
    _assert_same(
        paper_tables_frame(settings, whole["pre"], whole["post"], boot=boot_whole),
        paper_tables_frame(settings, p["pre"], p["post"], boot=boot_part),
    )


def test_read_columns_keeps_rows_order_and_types_and_skips_absent_columns():
    con = duckdb.connect()
    con.execute(
        "create table t as select range as i, range * 0.5 as x, 'a' || range as s, "
        "case when range % 3 = 0 then null else range end as n from range(50)"
    )
    got = read_columns(con.table("t"), ["n", "x", "absent"])
    assert list(got.columns) == ["x", "n"]  # the relation's order; an absent column is left out
    whole = con.table("t").df()
    _assert_same(got, whole[["x", "n"]])
    assert len(read_columns(con.table("t"), ["absent"])) == 50


def test_to_pandas_is_the_frame_df_gives() -> None:
    """panel_io.to_pandas converts text through Arrow but must give exactly `.df()`'s frame:
    text with and without NULLs, a text column with no value (an object column in `.df()`),
    dates, nullable integers and booleans, no rows, only text."""
    from lookahead.stats.panel_io import to_pandas

    con = duckdb.connect()
    con.execute("""create table t as select
        'r' || i as row_id, case when i % 3 = 0 then null else 'k' || i end as key,
        cast(null as varchar) as empty_text, i * 0.5 as x,
        case when i % 4 = 0 then null else i end as n,
        case when i % 5 = 0 then null else i % 2 = 0 end as flag,
        date '2020-01-01' + cast(i as integer) as d
        from range(1000) r(i)""")
    for rel in (
        con.table("t"),
        con.table("t").project("row_id, key, x, n, flag, d"),
        con.table("t").project("row_id, key"),
        con.table("t").filter("false"),
        con.table("t").project("x, d"),
    ):
        expected = rel.df()
        pd.testing.assert_frame_equal(to_pandas(rel), expected, check_exact=True)
    text = to_pandas(con.table("t").project("row_id, key, x"))
    assert str(text["key"].dtype) == str(con.table("t").project("key").df()["key"].dtype)
