"""The claim tables of every claim demo, recorded once and compared with a later build.

    python scripts/claims_equivalence.py record [STUDY ...]   # the tables as built now
    python scripts/claims_equivalence.py check  [STUDY ...]   # dbt build +tag:claims, then compare

Why: the claim tables moved from one Python computation into dbt models (sources,
staging, intermediate, marts); their numbers must stay what they were. `record` writes
each study's five claim marts, as `dbt build --select +tag:claims` writes them from the
claim jobs' raw lines already in the study's claims_raw_dir, to
outputs/claims_reference/<study file stem>/<table>.parquet. `check` builds the claim
models of each study into a scratch database and compares each table with its record:
numbers to 1e-12, strings, dates and nulls exactly, rows in the order of the table's key.
Run the claim jobs first (`lookahead run --study FILE --yes`, or
`lookahead jobs --study FILE --yes`); the studies default to every claim
demo of `make demo` / `make demo-claims`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lookahead.children import dbt_command, settings_file_env  # noqa: E402
from lookahead.config import load_study  # noqa: E402

DEMO_STUDIES = (
    "demo/claims/leaky.yml",
    "demo/claims/prudent.yml",
    "demo/claims/regression/leaky.yml",
    "demo/claims/regression/prudent.yml",
    "demo/claims/ranking/leaky.yml",
    "demo/claims/ranking/prudent.yml",
    "demo/claims/demo_contaminated.yml",
    "demo/claims/demo_clean.yml",
)
#: each table's rows in the order of this key (the build's order is not the contract)
TABLE_KEYS = {
    "claims": ["agent", "instance_id", "claim_id"],
    "instance_leakage": ["agent", "instance_id"],
    "claims_summary": ["agent", "task"],
    "claims_repredict": ["agent", "instance_id"],
    "claims_rejects": ["source", "column", "row", "reason"],
}
REFERENCE = ROOT / "outputs" / "claims_reference"
TOLERANCE = 1e-12


def _folder(study_file: str) -> Path:
    return REFERENCE / Path(study_file).with_suffix("").as_posix().replace("/", "__")


def _ordered(df: pd.DataFrame, table: str) -> pd.DataFrame:
    key = TABLE_KEYS[table]
    out = df.copy()
    text = out[key].astype("string").fillna("\x00")
    order = text.sort_values(key, kind="stable").index
    return out.loc[order].reset_index(drop=True)


def record(study_file: str) -> None:
    """The five claim marts as the build writes them now, as parquet."""
    with tempfile.TemporaryDirectory(prefix="claims-equivalence-") as tmp:
        tables = built_tables(study_file, Path(tmp) / "claims.duckdb")
    folder = _folder(study_file)
    folder.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        _ordered(df, name).to_parquet(folder / f"{name}.parquet", index=False)
    print(f"{study_file}: recorded " + ", ".join(f"{n} ({len(df)} rows)" for n, df in tables.items()))


def built_tables(study_file: str, db: Path) -> dict[str, pd.DataFrame]:
    """dbt build --select +tag:claims of the study into `db`; the five marts."""
    study = load_study(ROOT / study_file)
    with settings_file_env(study) as env:
        env = {**env, "LOOKAHEAD_DUCKDB": str(db)}
        proc = subprocess.run(
            dbt_command(["build", "--select", "+tag:claims"]), cwd=ROOT, env=env, capture_output=True, text=True
        )
    if proc.returncode:
        raise SystemExit(f"{study_file}: dbt build failed\n{proc.stdout[-4000:]}")
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
        for stg in sorted(n for n in names if n.startswith("stg_claim_")):
            n, bad = con.sql(f"select count(*), count(*) filter (where not fields_match) from {stg}").fetchone()
            print(f"  {stg}: {n} line(s), {bad} whose fields disagree with their key")
        return {name: con.sql(f"select * from {name}").df() for name in TABLE_KEYS}
    finally:
        con.close()


def differences(table: str, want: pd.DataFrame, got: pd.DataFrame) -> list[str]:
    """What differs between a recorded table and a built one (empty: equal)."""
    if list(want.columns) != list(got.columns):
        return [f"{table}: columns {list(got.columns)} != recorded {list(want.columns)}"]
    if len(want) != len(got):
        return [f"{table}: {len(got)} rows != recorded {len(want)}"]
    want, got = _ordered(want, table), _ordered(got, table)
    out = []
    for col in want.columns:
        a, b = want[col], got[col]
        if pd.api.types.is_numeric_dtype(a) and not pd.api.types.is_bool_dtype(a):
            x = pd.to_numeric(a, errors="coerce").astype(float).to_numpy()
            y = pd.to_numeric(b, errors="coerce").astype(float).to_numpy()
            same = (np.isnan(x) & np.isnan(y)) | (np.abs(x - y) <= TOLERANCE)
        elif pd.api.types.is_datetime64_any_dtype(a):
            same = (a.isna() & b.isna()).to_numpy() | (pd.to_datetime(a) == pd.to_datetime(b)).to_numpy()
        else:
            sa, sb = a.astype("string"), b.astype("string")
            same = (sa.isna() & sb.isna()).to_numpy() | (sa == sb).fillna(False).to_numpy()
        for i in np.flatnonzero(~same)[:3]:
            out.append(f"{table}.{col} row {i}: built {b.iloc[i]!r} != recorded {a.iloc[i]!r}")
    return out


def check(study_file: str) -> bool:
    folder = _folder(study_file)
    with tempfile.TemporaryDirectory(prefix="claims-equivalence-") as tmp:
        got = built_tables(study_file, Path(tmp) / "claims.duckdb")
    problems = []
    for name in TABLE_KEYS:
        want = pd.read_parquet(folder / f"{name}.parquet")
        problems += differences(name, want, got[name])
    counts = ", ".join(f"{n} {len(got[n])}" for n in TABLE_KEYS)
    print(f"{study_file}: {'equal' if not problems else 'DIFFERENT'} ({counts} rows)")
    for p in problems:
        print(f"  {p}")
    return not problems


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("record", "check"))
    ap.add_argument("studies", nargs="*", default=list(DEMO_STUDIES))
    a = ap.parse_args(argv)
    os.chdir(ROOT)
    if a.action == "record":
        for s in a.studies:
            record(s)
        return 0
    return 0 if all([check(s) for s in a.studies]) else 1


if __name__ == "__main__":
    sys.exit(main())
