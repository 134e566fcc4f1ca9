"""Baseline for the dbt build benchmark: the protocol path as one bare script.

DuckDB reads the observations and the raw JSONL caches, maps answers to labels (the
package's parser, applied to the distinct answers), turns recall top-k log-probs into
P(up), P(down) and LAP and the Min-K% line's prompt log-probs into the prompt measures
(Min-K%, loss, zlib, Min-K%++), merges, numbers
the fixed effects and splits high/low LAP at the sample median, as the dbt models do;
pyfixest then fits the protocol's ten regressions (validation pooled/high/low, the
high-minus-low difference and detection, pre and post cutoff) with the project's vcov
(CRV1 by entity, reghdfe small-sample correction, singletons dropped). The difference
regression is written here from its definition (ud in sd units of its half, entity x
half and period x half fixed effects), not imported, so the comparison checks it too.

No gates, no data tests, no result tables: what is left when everything dbt adds is
taken away, so `dbt build` can be stated as a ratio against it. The coefficients must
equal dbt's `regression_results` (benchmarks/bench_dbt_build.py checks that).

    python benchmarks/bare_protocol.py --vars vars.json --out coefficients.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import duckdb

from lookahead.config import Study


def build_panel(con: duckdb.DuckDBPyConnection, v: Study) -> None:
    """Table `panel` from the study files (synthetic benchmark layout: trading_day periods,
    recall LAP, pooled-median split, labels up/down/unknown)."""
    from lookahead.scoring import parse_forecast

    raw = Path(v.output.raw_dir)
    labels = v.prompts.forecast_labels
    con.execute(f"""
        create table obs as
        select row_id, trim(entity_id) as entity_id, try_cast(text_date as date) as text_date,
               try_cast(target_date as date) as target_date, try_cast(outcome as double) as outcome
        from read_csv('{v.input.data_path}', header = true, all_varchar = true)
    """)
    con.execute(f"""
        create table fc as
        select row_id, response_text
        from read_json('{raw / "forecast.jsonl"}', format = 'newline_delimited')
        where key is not null
    """)
    distinct = [r[0] for r in con.execute("select distinct response_text from fc").fetchall()]
    parsed = [(r, parse_forecast(r, labels)[1]) for r in distinct]
    con.execute("create table answers (response_text varchar, mu_hat double)")
    con.executemany("insert into answers values (?, ?)", parsed)
    con.execute(f"""
        create table rc as
        with src as (
            select entity_id, try_cast(target_date as date) as target_date,
                   list_distinct(list_transform(top_logprobs, lambda t: {{'id': cast(t.token_id as varchar),
                       'text': lower(trim(t.token)), 'p': exp(t.logprob)}})) as returned
            from read_json('{raw / "recall.jsonl"}', format = 'newline_delimited')
            where key is not null
        )
        select entity_id, target_date,
               coalesce(list_sum(list_transform(list_filter(returned, lambda t: t.text = 'up'), lambda t: t.p)), 0) as p_up,
               coalesce(list_sum(list_transform(list_filter(returned, lambda t: t.text = 'down'), lambda t: t.p)), 0) as p_down
        from src
    """)
    k = v.measures.mink_k
    # every prompt measure the dbt build scores from the Min-K% line (lookahead/measures.py:
    # mink, loss, zlib, minkpp), from one read of it; a line with a missing or invalid
    # log-prob gets no loss, zlib or Min-K%++ score, as in the dbt models
    con.execute(f"""
        create table mk as
        with src as (
            select row_id, zlib_bytes, list_slice(prompt_logprobs, 2, len(prompt_logprobs)) as toks
            from read_json('{raw / "mink.jsonl"}', format = 'newline_delimited', columns = {{
                'key': 'VARCHAR', 'row_id': 'VARCHAR', 'zlib_bytes': 'BIGINT',
                'prompt_logprobs': 'STRUCT(logprob DOUBLE, vocab_mean DOUBLE, vocab_var DOUBLE)[]'}})
            where key is not null
        ),
        lines as (
            select row_id, zlib_bytes, toks,
                   list_sort(list_filter(list_transform(toks, lambda t: t.logprob), lambda lp: lp is not null)) as lps,
                   coalesce(list_bool_or(list_transform(toks, lambda t: t.logprob is null or isnan(t.logprob)
                       or isinf(t.logprob) or t.logprob > 0)), true) as bad
            from src
        ),
        scored as (
            select row_id, lps, zlib_bytes,
                   case when not bad then list_avg(lps) end as lap_loss,
                   case when not bad and not coalesce(list_bool_or(list_transform(toks, lambda t: t.vocab_mean is null
                       or t.vocab_var is null or not t.vocab_var > 0)), true)
                       then list_sort(list_transform(toks, lambda t: (t.logprob - t.vocab_mean) / sqrt(t.vocab_var)))
                   end as zs
            from lines
        )
        select row_id,
               exp(list_avg(list_slice(lps, 1, greatest(1, floor(len(lps) * {k}))))) as lap_mink,
               lap_loss,
               case when zlib_bytes > 0 then lap_loss / zlib_bytes end as lap_zlib,
               list_avg(list_slice(zs, 1, greatest(1, floor(len(zs) * {k})))) as lap_minkpp
        from scored
    """)
    con.execute(f"""
        create table panel as
        with merged as (
            select o.row_id, o.entity_id, o.target_date, o.outcome, a.mu_hat, m.lap_mink, m.lap_loss, m.lap_zlib,
                   m.lap_minkpp,
                   r.p_up - r.p_down as ud, r.p_up + r.p_down as lap,
                   case when o.target_date <= date '{v.protocol.training_cutoff}' then 'pre' else 'post' end as sample,
                   strftime(o.target_date, '%Y-%m-%d') as period
            from obs o
            left join fc f on o.row_id = f.row_id
            left join answers a on f.response_text = a.response_text
            left join rc r on o.entity_id = r.entity_id and o.target_date = r.target_date
            left join mk m on o.row_id = m.row_id
            where o.entity_id is not null and o.target_date > o.text_date and o.outcome is not null
        ),
        med as (select sample, median(lap) as m from merged group by sample)
        select merged.*, dense_rank() over (order by entity_id) as entity_num,
               dense_rank() over (order by period) as period_num,
               case when lap > med.m then 1 else 0 end as high_lap
        from merged join med using (sample)
    """)


#: The prompt measures' panel columns whose sums must equal the dbt panel's.
LAP_SUMS = ("lap_mink", "lap_loss", "lap_zlib", "lap_minkpp")


def fit_all(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, float]]:
    import pyfixest as pf

    ssc = pf.ssc(k_adj=True, k_fixef="nonnested", G_adj=True, G_df="min")
    out: dict[str, dict[str, float]] = {}
    for sample in ("pre", "post"):
        df = con.execute(
            "select outcome, ud, mu_hat, lap, high_lap, entity_num, period_num, entity_id as _cluster "
            "from panel where sample = ?",
            [sample],
        ).df()
        specs = {
            "validation_pooled": ("outcome ~ ud | entity_num + period_num", df),
            "validation_high_lap": ("outcome ~ ud | entity_num + period_num", df[df["high_lap"] == 1]),
            "validation_low_lap": ("outcome ~ ud | entity_num + period_num", df[df["high_lap"] == 0]),
            "detection": ("outcome ~ mu_hat + lap + mu_hat:lap | entity_num + period_num", df),
        }
        # high minus low: the halves stacked, ud in sd units of its half, FE x half
        halves = df.assign(
            ud=df["ud"] / df.groupby("high_lap")["ud"].transform("std"),
            entity_half=df["entity_num"] * 2 + df["high_lap"],
            period_half=df["period_num"] * 2 + df["high_lap"],
        )
        specs["validation_difference"] = ("outcome ~ ud + ud:high_lap | entity_half + period_half", halves)
        for spec, (fml, data) in specs.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = pf.feols(fml, data=data, vcov={"CRV1": "_cluster"}, ssc=ssc, fixef_rm="singleton")
            out[f"{spec}|{sample}"] = {str(k): float(b) for k, b in zip(fit._coefnames, fit._beta_hat, strict=False)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vars", type=Path, required=True, help="the study vars (JSON) the benchmark generated")
    ap.add_argument("--out", type=Path, required=True, help="where the coefficients go (JSON)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    # a database file, as dbt builds into one: its tables can leave memory (at 10,000,000
    # rows an in-memory database would hold every staged table at once)
    db = a.out.with_suffix(".duckdb")
    db.unlink(missing_ok=True)
    con = duckdb.connect(str(db))
    build_panel(con, Study.from_json(a.vars.read_text()))
    coefs = fit_all(con)
    sums = dict(
        zip(LAP_SUMS, con.execute(f"select {', '.join(f'sum({c})' for c in LAP_SUMS)} from panel").fetchone(), strict=False)
    )
    con.close()
    db.unlink()
    a.out.write_text(json.dumps({"coefficients": coefs, "lap_sums": sums, "wall_s": time.perf_counter() - t0}, indent=1))


if __name__ == "__main__":
    main()
