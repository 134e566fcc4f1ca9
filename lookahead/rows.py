"""The one definition of an input row: read, map, validate, derive row_id, subsample.

The LLM jobs (llm_jobs/context.py) and dbt staging (python_models/staging/stg_observations.py)
both call this module, so the jobs never query a row that staging rejects nor skip one
it keeps, and raw lines always merge back onto their row. Nothing here is re-written in
SQL.

Reading (``read_table``)
    CSV (``.csv``, ``.tsv``, ``.txt``) and parquet (``.parquet``, ``.pq``), suffix in any
    case. Every column is read as text (``None`` for an empty cell) so ids such as
    ``007`` and the text cells keep exactly what the file holds. The CSV delimiter is
    the one of ``, ; tab |`` that occurs most often in the header line outside quotes
    (comma on a tie or when none occurs); the setting ``csv_delimiter`` forces it.
    Parquet is read with pyarrow: a time-zone-aware timestamp becomes an ISO timestamp
    with its offset in the column's own zone (21:00 New York stays 21:00-05:00), a
    plain date ``YYYY-MM-DD``, numbers their shortest text.

Dates (``parse_dates``), one rule for both date columns
    * ``YYYY-MM-DD`` (or ``YYYY/MM/DD``), optionally followed by a time ``HH:MM[:SS[.f]]``
      and an offset (``Z``, ``+05:30``, ``-0500``): the calendar date as written. When the
      setting ``date_timezone`` names an IANA zone, a timestamp that carries an offset
      is first converted to that zone; one without an offset is taken as already in it.
    * a named-month date (``5 Oct 2021``, ``Oct 5, 2021``, ``05-Oct-2021``).
    * ``date_format`` (a strptime format such as ``%d/%m/%Y``) when set.
    * numeric day/month forms (``10/05/2021``, ``10.05.2021``) are ambiguous: rejected as
      "ambiguous <column>" unless ``date_format`` says which order the file uses.
    * anything else (including spreadsheet serial numbers) is "unparseable <column>".

Validation
    A row is valid when none of the reasons in ``seeds/reject_reasons.csv`` applies; a
    rejected row carries the first reason that applies, in the seed's order. Whitespace
    means Python's ``str.strip`` (tabs, newlines, Unicode spaces); entity_id,
    entity_name, ticker and a given row_id are stripped, text is kept as written. The
    outcome must be a finite number.

row_id
    The ``column_map.row_id`` cell (stripped) when the file has one and the cell is not
    empty, else the first 16 hex characters of sha256(entity_id|text_date|text) with
    entity_id as validated (stripped, and normalized by ``id_normalization``), text as
    written in the file and text_date the parsed date as ``YYYY-MM-DD``. Valid rows with
    the same derived id but different outcomes are all rejected as "conflicting
    outcome"; a later valid row with the same derived id and outcome is rejected as
    "duplicate row"; a duplicated id in the row_id column is a settings error.

Subsample (settings ``subsample_rows`` and ``subsample_seed``)
    The valid rows ranked by sha256(seed|row_id) are kept up to N: the same rows for
    every job and for dbt, whatever the row order of the file.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import re
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from lookahead.config import PROJECT_ROOT, Study, StudyConfigError, check_setting
from lookahead.settings_sections import InputSettings

REJECT_REASONS_FILE = PROJECT_ROOT / "seeds" / "reject_reasons.csv"
CSV_SUFFIXES = (".csv", ".tsv", ".txt")
PARQUET_SUFFIXES = (".parquet", ".pq")
DELIMITERS = (",", ";", "\t", "|")
NAMED_MONTH_FORMATS = (
    "%d %b %Y",
    "%d %B %Y",
    "%b %d, %Y",
    "%B %d, %Y",
    "%b %d %Y",
    "%B %d %Y",
    "%d-%b-%Y",
    "%d-%B-%Y",
)
_ISO = (
    r"^(?P<y>\d{4})[-/](?P<m>\d{1,2})[-/](?P<d>\d{1,2})"
    r"(?:[T ](?P<H>\d{1,2}):(?P<M>\d{2})(?::(?P<S>\d{2})(?:[.,]\d+)?)?"
    r"\s*(?P<tz>Z|UTC|GMT|[+-]\d{2}(?::?\d{2})?)?)?$"
)
_NUMERIC_DAY_MONTH = r"^\d{1,2}[/.-]\d{1,2}[/.-]\d{2,4}(?:[ T].*)?$"
# Python's whitespace (str.isspace), the characters str.strip() removes.
PY_WHITESPACE = "".join(chr(i) for i in range(0x110000) if chr(i).isspace())
_NON_FINITE = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"}


@lru_cache(maxsize=1)
def reject_reasons() -> tuple[str, ...]:
    """The reject reasons in the order they apply (seeds/reject_reasons.csv)."""
    with open(REJECT_REASONS_FILE, encoding="utf-8", newline="") as fh:
        return tuple(r["reason"] for r in csv.DictReader(fh))


# ----------------------------------------------------------------------------- reading


def sniff_delimiter(header_line: str) -> str:
    """The one of , ; tab | that occurs most often outside quotes in the header line."""
    counts = dict.fromkeys(DELIMITERS, 0)
    quoted = False
    for ch in header_line:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in counts:
            counts[ch] += 1
    best = max(DELIMITERS, key=lambda d: counts[d])  # max keeps the first on a tie: comma
    return best if counts[best] else ","


def _delimiter_setting(value: Any) -> str | None:
    """csv_delimiter as checked by the settings schema; 'tab' is the tab character."""
    value = check_setting("csv_delimiter", value)
    return "\t" if value == "tab" else value


def read_table(path: Path, delimiter: str | None = None) -> pd.DataFrame:
    """The user's CSV or parquet file, every column as text (None for an empty cell)."""
    return next(read_table_chunks(path, delimiter, None))


def _parquet_frame(table: pa.Table) -> pd.DataFrame:
    """A parquet table's columns as text (the rule in the module docstring)."""
    out: dict[str, pd.Series] = {}
    for name, col in zip(table.column_names, table.columns, strict=False):
        t = col.type
        if pa.types.is_timestamp(t):
            s = col.to_pandas()
            text = s.dt.strftime("%Y-%m-%dT%H:%M:%S%z" if t.tz else "%Y-%m-%dT%H:%M:%S")
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            text = col.to_pandas()
        else:
            try:
                text = pc.cast(col, pa.string()).to_pandas()
            except pa.ArrowException:
                text = pd.Series([None if v is None else str(v) for v in col.to_pylist()])
        text = text.astype(object)
        out[str(name)] = text.where(text.notna(), None)
    return pd.DataFrame(out)


#: Rows read and staged at a time by :func:`scan_rows`: what the jobs and `lookahead check`
#: hold as Python strings at once (a row's cells as Python objects weigh about ten times
#: the file's bytes; a whole 10-million-row file staged at once took 8 GB).
CHUNK_ROWS = 100_000


def read_table_chunks(path: Path, delimiter: str | None = None, chunk_rows: int | None = CHUNK_ROWS) -> Iterator[pd.DataFrame]:
    """`read_table`, `chunk_rows` rows at a time (None: the whole file as one frame); a
    header-only file gives one empty frame with the file's columns."""
    if not path.exists():
        raise StudyConfigError(f"setting 'data_path': file '{path}' does not exist")
    if path.is_dir():
        raise StudyConfigError(f"setting 'data_path': '{path}' is a folder, not a file")
    if path.stat().st_size == 0:
        raise StudyConfigError(f"setting 'data_path': file '{path}' is empty (0 bytes)")
    suffix = path.suffix.lower()
    if suffix in CSV_SUFFIXES:
        yield from _read_csv_chunks(path, _delimiter_setting(delimiter), chunk_rows)
        return
    if suffix not in PARQUET_SUFFIXES:
        raise StudyConfigError(f"setting 'data_path': '{path}' must be a .csv, .tsv or .parquet file (any case)")
    import pyarrow.parquet as pq

    try:
        if chunk_rows is None:
            table = pq.read_table(path)
        else:
            pf = pq.ParquetFile(path)
            empty = True
            for batch in pf.iter_batches(batch_size=chunk_rows):
                empty = False
                yield _parquet_frame(pa.Table.from_batches([batch]))
            if not empty:
                return
            table = pf.schema_arrow.empty_table()
    except (pa.ArrowException, OSError) as err:
        raise StudyConfigError(f"setting 'data_path': '{path}' is not a readable parquet file ({err})") from None
    yield _parquet_frame(table)


def _read_csv_chunks(path: Path, delimiter: str | None, chunk_rows: int | None) -> Iterator[pd.DataFrame]:
    """The CSV's cells as text, ``chunk_rows`` rows at a time (None: the whole file as one
    frame); a header-only file gives one empty frame. One line for a file that is not
    UTF-8 or does not parse with its delimiter."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        header = fh.readline()
    sep = delimiter or sniff_delimiter(header)
    options: dict[str, Any] = {"dtype": object, "keep_default_na": False, "sep": sep, "encoding": "utf-8-sig"}

    def cells(df: pd.DataFrame) -> pd.DataFrame:
        df.columns = [str(c) for c in df.columns]
        return df.where(df != "", None)

    try:
        if chunk_rows is None:
            yield cells(pd.read_csv(path, **options))
            return
        with pd.read_csv(path, chunksize=chunk_rows, **options) as reader:
            empty = True
            for df in reader:
                empty = False
                yield cells(df)
        if empty:
            yield cells(pd.read_csv(path, nrows=0, **options))
    except UnicodeDecodeError as err:
        raise StudyConfigError(f"setting 'data_path': '{path}' is not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise StudyConfigError(
            f"setting 'data_path': '{path}' cannot be read as CSV with delimiter {sep!r} ({first}); "
            f"set csv_delimiter if the delimiter was guessed wrong"
        ) from None


def count_data_rows(path: Path) -> int:
    """How many data rows the input file holds, at most, without parsing it: a parquet
    file's row count from its metadata; a CSV's line breaks after the header (a line
    break inside a quoted cell counts as a row too, so this may overcount, never
    undercount). 0 when the file cannot be read (the run-start check reports that).

    Why: what the build's memory must hold grows with the rows (lookahead.dbt_plugin.
    memory_limit), and a line count of a 1 GB file takes a fraction of a second where
    reading it takes most of a minute."""
    try:
        if path.suffix.lower() in PARQUET_SUFFIXES:
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        breaks, last = 0, b"\n"
        with open(path, "rb") as fh:
            while block := fh.read(1 << 24):
                breaks += block.count(b"\n")
                last = block[-1:]
        lines = breaks + (last != b"\n")  # a last line without a line break
        return max(lines - 1, 0)  # the header
    except (OSError, ValueError, pa.ArrowException):
        return 0


# ----------------------------------------------------------------------------- dates


def _timezone_setting(value: Any) -> zoneinfo.ZoneInfo | None:
    if value is None or value == "":
        return None
    try:
        return zoneinfo.ZoneInfo(str(value))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise StudyConfigError(
            f"setting 'date_timezone': '{value}' is not an IANA time zone (e.g. America/New_York, UTC)"
        ) from None


def _offset_minutes(tz: pd.Series) -> pd.Series:
    """'Z' / '+05:30' / '-0500' / '+05' -> signed minutes east of UTC (NaN when absent)."""
    t = tz.str.upper().replace({"Z": "+00:00", "UTC": "+00:00", "GMT": "+00:00"})
    sign = np.where(t.str[0] == "-", -1.0, 1.0)
    digits = t.str[1:].str.replace(":", "", regex=False)
    hours = pd.to_numeric(digits.str[:2], errors="coerce")
    mins = pd.to_numeric(digits.str[2:4].replace("", "0"), errors="coerce").fillna(0)
    return sign * (hours * 60 + mins)


def parse_dates(raw: pd.Series, date_format: str | None = None, timezone: Any = None) -> tuple[pd.Series, pd.Series]:
    """(dates as datetime64 at midnight or NaT, status None | 'missing' | 'ambiguous' | 'unparseable').

    The module docstring states the rule. Plain YYYY-MM-DD cells (the common case) are
    parsed in one vectorised Arrow call; only the other cells take the slower paths."""
    zone = _timezone_setting(timezone)
    raw = raw.reset_index(drop=True)
    cells = _strip_arrow(raw)
    missing = pd.Series(cells.is_null().to_numpy(zero_copy_only=False), index=raw.index)
    out = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns]")
    status = pd.Series(None, index=raw.index, dtype=object)
    status[missing] = "missing"
    fast = pc.strptime(cells, format="%Y-%m-%d", unit="s", error_is_null=True)
    # Arrow rolls 2021-02-29 over to 1 March: keep only cells that format back unchanged
    # (a date's cast to text is YYYY-MM-DD, as strftime would write it at a 20th of the cost)
    same = pc.fill_null(pc.equal(pc.cast(pc.cast(fast, pa.date32()), pa.string()), cells), False)
    fast_dates = pd.Series(fast.to_numpy(zero_copy_only=False), index=raw.index).astype("datetime64[ns]")
    ok = pd.Series(same.to_numpy(zero_copy_only=False), index=raw.index).astype(bool)
    out[ok] = fast_dates[ok]
    todo = ~missing & ~ok
    if todo.any():
        rest = pa.array(todo.to_numpy())
        s = pd.Series(cells.filter(rest).to_numpy(zero_copy_only=False), index=raw.index[todo], dtype=object)
        sub_out, sub_status = _parse_dates_slow(s, date_format, zone)
        out[todo] = sub_out
        status[todo] = sub_status
    return out, status


def _parse_dates_slow(s: pd.Series, date_format: str | None, zone: zoneinfo.ZoneInfo | None) -> tuple[pd.Series, pd.Series]:
    """The rule for cells that are not plain YYYY-MM-DD (timestamps, other forms)."""
    out = pd.Series(pd.NaT, index=s.index, dtype="datetime64[ns]")
    status = pd.Series(None, index=s.index, dtype=object)
    m = s.str.extract(_ISO, flags=re.IGNORECASE)
    iso = m["y"].notna()
    if iso.any():
        mi = m[iso]
        num = {k: pd.to_numeric(mi[k], errors="coerce") for k in ("y", "m", "d", "H", "M", "S")}
        day = pd.to_datetime(pd.DataFrame({"year": num["y"], "month": num["m"], "day": num["d"]}), errors="coerce")
        hh, mm, ss = num["H"].fillna(0), num["M"].fillna(0), num["S"].fillna(0)
        bad_time = (hh > 23) | (mm > 59) | (ss > 59)
        day = day.mask(bad_time)
        if zone is not None:
            off = _offset_minutes(mi["tz"].fillna(""))
            has_off = mi["tz"].notna() & day.notna()
            if has_off.any():
                utc = (
                    day[has_off]
                    + pd.to_timedelta(hh[has_off] * 3600 + mm[has_off] * 60 + ss[has_off], unit="s")
                    - pd.to_timedelta(off[has_off], unit="m")
                )
                local = utc.dt.tz_localize("UTC").dt.tz_convert(zone).dt.tz_localize(None).dt.normalize()
                day = day.astype("datetime64[ns]")
                day[has_off] = local.astype("datetime64[ns]")
        out[iso] = day.astype("datetime64[ns]")
        status[iso & out.isna()] = "unparseable"

    rest = ~iso
    if date_format and rest.any():
        parsed = _parse_with_format(s[rest], date_format, zone)
        out[rest] = parsed
        rest = rest & out.isna()
    if rest.any():
        ambiguous = rest & s.str.match(_NUMERIC_DAY_MONTH).fillna(False).astype(bool)
        status[ambiguous] = "ambiguous"
        rest = rest & ~ambiguous
    for fmt in NAMED_MONTH_FORMATS:
        if not rest.any():
            break
        parsed = pd.to_datetime(s[rest], format=fmt, errors="coerce")
        out[rest] = parsed.astype("datetime64[ns]")
        rest = rest & out.isna()
    status[rest] = "unparseable"
    return out, status


def _parse_with_format(s: pd.Series, fmt: str, zone: zoneinfo.ZoneInfo | None) -> pd.Series:
    try:
        parsed = pd.to_datetime(s, format=fmt, errors="coerce")
    except ValueError:  # mixed offsets under %z: compare instants in UTC
        parsed = pd.to_datetime(s, format=fmt, errors="coerce", utc=True)
    if isinstance(parsed.dtype, pd.DatetimeTZDtype):
        parsed = parsed.dt.tz_convert(zone) if zone is not None else parsed
        parsed = parsed.dt.tz_localize(None)
    return parsed.dt.normalize().astype("datetime64[ns]")


# ----------------------------------------------------------------------------- validation


def normalize_ids(ids: pd.Series, rule: str | None) -> pd.Series:
    """Entity ids as the study compares them (setting id_normalization): as written
    (already stripped), or with an all-digit id's leading zeros removed (strip_zeros:
    '014593' and '14593' are one entity; '000' is '0')."""
    if rule != "strip_zeros":
        return ids
    digits = ids.str.fullmatch(r"[0-9]+").fillna(False).astype(bool)
    out = ids.copy()
    out[digits] = ids[digits].str.lstrip("0").replace("", "0")
    return out


def zero_padding_warning(ids: pd.Series, column: str) -> str | None:
    """One line when an all-digit id column mixes zero-padded and unpadded values (e.g.
    '014593' beside '14593'), which split one entity in two unless id_normalization is
    strip_zeros; None otherwise. Two example values are named: a padded one and the
    unpadded one it equals once its zeros go, when there is such a pair."""
    values = pd.Series(ids.dropna().astype(str).unique())
    if values.empty or not values.str.fullmatch(r"[0-9]+").all():
        return None
    padded = values[(values.str.len() > 1) & values.str.startswith("0")]
    unpadded = values[~values.isin(padded)]
    if padded.empty or unpadded.empty:
        return None
    stripped = padded.str.lstrip("0").replace("", "0")
    clash = stripped.isin(set(unpadded))
    a = padded[clash].iloc[0] if clash.any() else padded.iloc[0]
    b = stripped[clash].iloc[0] if clash.any() else unpadded.iloc[0]
    return (
        f"warning: column '{column}' (entity_id) holds all-digit ids with and without leading zeros "
        f"(e.g. '{a}' and '{b}'): as written they are different entities; set id_normalization: "
        "strip_zeros if they are the same"
    )


def derive_row_id(entity_id: str, text_date: str, text: str) -> str:
    """Deterministic row id: first 16 hex chars of sha256(entity_id|text_date|text)."""
    raw = f"{entity_id}|{text_date}|{text}".encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def _strip_arrow(s: pd.Series) -> pa.Array:
    """Python's str.strip on every cell (its exact whitespace set, trimmed by Arrow in one
    vectorised call), as an Arrow array; null for missing or empty results."""
    arr = pa.array(s.to_numpy(dtype=object), type=pa.string(), from_pandas=True)
    t = pc.utf8_trim(arr, characters=PY_WHITESPACE)
    return pc.if_else(pc.equal(t, ""), pa.scalar(None, pa.string()), t)


def _strip(s: pd.Series) -> pd.Series:
    """_strip_arrow as an object Series (None for missing or empty results)."""
    return pd.Series(_strip_arrow(s).to_numpy(zero_copy_only=False), index=s.index, dtype=object)


def _is_blank(s: pd.Series) -> pd.Series:
    """True where a cell is missing or only whitespace (no Python strings made)."""
    return pd.Series(_strip_arrow(s).is_null().to_numpy(zero_copy_only=False), index=s.index)


def derive_row_ids(entity_id: pd.Series, text_date_iso: pd.Series, text: pd.Series) -> pd.Series:
    """derive_row_id for whole columns in one vectorised DuckDB sha256 (the same bytes:
    tests/python/test_rows.py checks it against hashlib); None cells hash as ''."""
    import duckdb

    table = pa.table(
        {
            name: pa.array(col.to_numpy(dtype=object), type=pa.string(), from_pandas=True)
            for name, col in (("e", entity_id), ("d", text_date_iso), ("t", text))
        }
    )
    con = duckdb.connect()
    try:
        con.register("cells", table)
        ids = (
            con.execute(
                "select substr(sha256(coalesce(e, '') || '|' || coalesce(d, '') || '|' || coalesce(t, '')), 1, 16) from cells"
            )
            .to_arrow_table()
            .column(0)
        )
    finally:
        con.close()
    return pd.Series(ids.to_numpy(zero_copy_only=False), index=entity_id.index, dtype=object)


def _subsample_setting(settings: InputSettings) -> tuple[int | None, int]:
    """(subsample_rows, subsample_seed) as checked by the settings schema (a section built
    by hand, InputSettings.with_defaults, is not checked when built)."""
    return (check_setting("subsample_rows", settings.subsample_rows), check_setting("subsample_seed", settings.subsample_seed))


#: A text cell longer than this rejects its row ("text too long"): no prompt is built from
#: it, so one runaway cell (a whole document pasted into a row) neither costs a query nor
#: fills a job's memory with prompts (docs/SECURITY.md).
MAX_TEXT_CELL_CHARS = 100_000


def stage_rows(
    df: pd.DataFrame, settings: InputSettings, source: str = "the input", first_row: int = 1, cross_row: bool = True
) -> pd.DataFrame:
    """Every input row, mapped to the protocol's columns and validated (nothing dropped).

    Columns: source_row_number (1-based), row_id, row_id_derived, entity_id, entity_name,
    ticker, text, text_date_raw, target_date_raw, outcome_raw, text_date, target_date
    (datetime64 at midnight), outcome (float), reject_reason (None when valid),
    in_subsample, then every other input column as text.

    ``df`` may be one chunk of the file (:func:`scan_rows`): ``first_row`` is its first
    row's number, and ``cross_row=False`` leaves out what compares rows with each other
    (a given row_id's uniqueness, conflicting outcome, duplicate row, the subsample),
    which the scan decides over the whole file (:func:`scan_rows`)."""
    cmap: dict[str, str | None] = dict(settings.column_map or {})
    missing_cols = [f"{p} -> '{c}'" for p, c in cmap.items() if c and c not in df.columns]
    if missing_cols:
        raise StudyConfigError(
            f"setting 'column_map': column(s) not in {source}: {', '.join(missing_cols)}; "
            f"file has {', '.join(map(str, df.columns))}"
        )
    for extra in settings.extra_columns or []:
        if extra not in df.columns:
            raise StudyConfigError(f"setting 'extra_columns': column '{extra}' not found in {source}")

    n = len(df)
    df = df.reset_index(drop=True)
    none = pd.Series([None] * n, dtype=object)

    def col(proto: str) -> pd.Series:
        name = cmap.get(proto)
        return df[name].astype(object) if name else none

    entity_raw, text = col("entity_id"), col("text")
    text_date_raw, target_date_raw, outcome_raw = col("text_date"), col("target_date"), col("outcome")
    fmt, tz = settings.date_format, settings.date_timezone
    text_date, text_status = parse_dates(text_date_raw, fmt, tz)
    target_date, target_status = parse_dates(target_date_raw, fmt, tz)

    out = pd.DataFrame({"source_row_number": np.arange(first_row, first_row + n, dtype=np.int64)})
    out["entity_id"] = normalize_ids(_strip(entity_raw), settings.id_normalization)
    out["entity_name"] = _strip(col("entity_name"))
    out["ticker"] = _strip(col("ticker"))
    out["text"] = text
    out["text_date_raw"] = text_date_raw
    out["target_date_raw"] = target_date_raw
    out["outcome_raw"] = outcome_raw
    out["text_date"] = text_date
    out["target_date"] = target_date

    o = _strip(outcome_raw)
    number = pd.to_numeric(o, errors="coerce").astype(float)
    non_finite = o.str.lower().isin(_NON_FINITE).fillna(False).astype(bool) | np.isinf(number)
    out["outcome"] = number.where(~non_finite & number.notna(), np.nan)

    given = _strip(col("row_id")) if cmap.get("row_id") else none
    if cross_row:
        _require_unique_ids(given, out["source_row_number"], cmap)
    derived = given.isna()
    row_id = given.copy()
    if derived.any():  # only rows without a given id are hashed (none when the file has ids)
        d = text_date[derived]
        # from the entity id as validated (stripped, normalized): a file re-saved with
        # padding or spaces around the ids keeps its row ids, hence its cached answers
        entity = out["entity_id"].where(out["entity_id"].notna(), entity_raw)
        row_id[derived] = derive_row_ids(entity[derived], d.dt.strftime("%Y-%m-%d").where(d.notna(), ""), text[derived])
    out.insert(1, "row_id", row_id)
    out.insert(2, "row_id_derived", derived)

    checks: dict[str, Callable[[], pd.Series]] = {
        "missing entity_id": lambda: out["entity_id"].isna(),
        "missing entity_name": lambda: out["entity_name"].isna(),
        "empty text": lambda: _is_blank(text),
        "text too long": lambda: text.str.len().fillna(0) > MAX_TEXT_CELL_CHARS,
        "missing text_date": lambda: text_status == "missing",
        "ambiguous text_date": lambda: text_status == "ambiguous",
        "unparseable text_date": lambda: text_status == "unparseable",
        "missing target_date": lambda: target_status == "missing",
        "ambiguous target_date": lambda: target_status == "ambiguous",
        "unparseable target_date": lambda: target_status == "unparseable",
        "target_date not after text_date": lambda: (target_date <= text_date).fillna(False),
        "missing outcome": lambda: o.isna(),
        "non-numeric outcome": lambda: number.isna() & ~non_finite,
        "non-finite outcome": lambda: non_finite,
        "conflicting outcome": lambda: _conflicting(out["row_id"], number, reason.isna()) if cross_row else no,
        "duplicate row": lambda: _later_duplicates(out["row_id"], reason.isna()) if cross_row else no,
    }
    if tuple(checks) != reject_reasons():
        raise RuntimeError(
            f"{REJECT_REASONS_FILE} and lookahead/rows.py disagree on the reject reasons: "
            f"{list(reject_reasons())} vs {list(checks)}"
        )
    reason = pd.Series([None] * n, dtype=object)
    no = pd.Series(False, index=reason.index)
    for name, check in checks.items():
        hit = check().to_numpy(dtype=bool) & reason.isna().to_numpy()
        reason[hit] = name
    out["reject_reason"] = reason

    size, seed = _subsample_setting(settings)
    out["in_subsample"] = _subsample_mask(out["row_id"], reason.isna(), size if cross_row else None, seed)

    taken = set(out.columns)
    for name in df.columns:  # other user columns: extra_columns and prompt placeholders
        if name not in taken:
            out[name] = df[name].astype(object)
    return out


def _require_unique_ids(given: pd.Series, row_number: pd.Series, cmap: dict[str, str | None]) -> None:
    """A row_id column holds each id once (a settings error otherwise, naming the first
    repeated value and its rows); ``given`` is None where a row has no id of its own."""
    dupes = given[given.notna() & given.duplicated(keep=False)]
    if len(dupes):
        first = dupes.iloc[0]
        same = (given == first).to_numpy(bool)
        rows = row_number[same].tolist()[:3]
        raise StudyConfigError(
            f"setting 'column_map.row_id': column '{cmap['row_id']}' is not unique: value '{first}' "
            f"appears {int(same.sum())} times (data rows {', '.join(map(str, rows))})"
        )


def _conflicting(row_id: pd.Series, outcome: pd.Series, valid: pd.Series) -> pd.Series:
    """Valid rows whose row_id is shared by a valid row with another outcome: every one
    of them (which outcome is true cannot be told), not a duplicate that keeps the first."""
    hit = pd.Series(False, index=row_id.index)
    # Only a row_id shared by two valid rows can conflict: the grouping (a sort of every
    # id, most of staging's time on a large file) runs on those rows alone, none when the
    # ids are unique, as they usually are.
    ids = row_id[valid]
    shared = ids.index[ids.duplicated(keep=False).to_numpy()]
    if len(shared):
        n_outcomes = outcome[shared].groupby(row_id[shared]).transform("nunique")
        hit[shared] = (n_outcomes > 1).to_numpy()
    return hit


def _later_duplicates(row_id: pd.Series, valid: pd.Series) -> pd.Series:
    """Valid rows whose row_id already belongs to an earlier valid row."""
    dup = pd.Series(False, index=row_id.index)
    dup[valid] = row_id[valid].duplicated(keep="first")
    return dup


def _subsample_mask(row_id: pd.Series, valid: pd.Series, size: int | None, seed: int) -> pd.Series:
    """True for the valid rows in the seeded subsample (all valid rows when size is None)."""
    if size is None or size >= int(valid.sum()):
        return valid.copy()
    rank = pd.Series(
        [hashlib.sha256(f"{seed}|{r}".encode()).hexdigest() for r in row_id[valid]],
        index=row_id[valid].index,
    )
    keep = rank.sort_values(kind="stable").index[:size]
    mask = pd.Series(False, index=row_id.index)
    mask[keep] = True
    return mask


def _staged_chunks(settings: InputSettings, path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    """The file's rows staged a chunk at a time, everything but the checks across rows."""
    first = 1
    for df in read_table_chunks(path, settings.csv_delimiter, chunk_rows):
        staged = stage_rows(df, settings, source=str(path), first_row=first, cross_row=False)
        first += len(staged)
        yield staged


@dataclass(frozen=True)
class RowFacts:
    """What the jobs' preflight asks of the rows they query (llm_jobs.context.preflight):
    how many, how many pre-cutoff, and the clusters those form."""

    n_rows: int
    n_pre: int
    pre_entities: int
    pre_dates: int
    entities: int

    @classmethod
    def of(cls, rows: pd.DataFrame, cutoff: Any) -> RowFacts:
        """The facts of rows already in memory (the rows `load_rows` gives)."""
        target = pd.to_datetime(rows["target_date"]).to_numpy("datetime64[ns]")
        pre = target <= np.datetime64(pd.Timestamp(str(cutoff)).to_datetime64(), "ns")
        entity = rows["entity_id"]
        return cls(len(rows), int(pre.sum()), int(entity[pre].nunique()), int(pd.unique(target[pre]).size), int(entity.nunique()))


@dataclass
class RowScan:
    """A first pass over the input file, a chunk at a time (:func:`scan_rows`): each row's
    reject reason and whether the jobs query it, decided exactly as `stage_rows` decides
    them on the whole file (the checks across rows run here, over compact columns: the
    row_id and a hash of it, the outcome, the reason), with no row held as Python strings
    beyond a chunk.

    :meth:`chunks` is the second pass: the rows again, chunk by chunk, as `load_rows`
    gives them. Why two passes: the checks across rows (a duplicate in the last chunk
    rejects a row of the first) are known only at the end, and holding every staged row
    until then is what a 10-million-row file cannot afford; a file of one chunk is
    staged once."""

    settings: InputSettings
    path: Path
    chunk_rows: int
    n: int
    reason: np.ndarray  # int8: index into reject_reasons(), -1 when valid
    queried: np.ndarray  # bool: valid and in the subsample
    entity_codes: np.ndarray  # int32: each row's entity_id as a code into entity_values
    entity_values: pa.Array
    target_day: np.ndarray  # int32: each row's target_date in days since 1970 (NO_DAY where none)
    chunk_sizes: list[int]
    _only: pd.DataFrame | None = None  # the staged rows of a file of one chunk

    def reject_counts(self) -> pd.Series:
        """Rejected rows by reason, most frequent first (as value_counts gives them)."""
        names = np.array(reject_reasons(), dtype=object)
        return pd.Series(names[self.reason[self.reason >= 0]], dtype=object).value_counts()

    @property
    def n_queried(self) -> int:
        return int(self.queried.sum())

    @property
    def n_rejected(self) -> int:
        return int((self.reason >= 0).sum())

    def queried_entities(self) -> pd.Series:
        """The distinct entity ids of the queried rows (for zero_padding_warning)."""
        codes = np.unique(self.entity_codes[self.queried])
        return pd.Series(self.entity_values.take(pa.array(codes)).to_pylist(), dtype=object)

    def facts(self, cutoff: Any) -> RowFacts:
        """RowFacts.of the queried rows, from the scan's columns."""
        q = self.queried
        last = np.datetime64(pd.Timestamp(str(cutoff)).floor("D").date(), "D").astype(np.int64)
        pre = q & (self.target_day <= last)  # a date at midnight is on or before the cutoff's day
        return RowFacts(
            int(q.sum()),
            int(pre.sum()),
            int(np.unique(self.entity_codes[pre]).size),
            int(np.unique(self.target_day[pre]).size),
            int(np.unique(self.entity_codes[q]).size),
        )

    def first_of_pairs(self) -> np.ndarray:
        """For each queried row, in file order (the rows :meth:`chunks` yields, laid end to
        end): whether it is the first queried row of its (entity_id, target_date), the row
        `unique_pairs` keeps.

        Why from the scan's codes: `lookahead check` gathers the recall pairs over chunks,
        and a set of every pair seen as Python strings was gigabytes at 5,000,000 pairs
        (2,000 entities by 2,500 dates); the entity code and the day (a date is at
        midnight, written as one text per day) name a pair exactly, in 8 bytes a row."""
        q = self.queried
        code = (self.entity_codes[q].astype(np.int64) << 32) | (self.target_day[q].astype(np.int64) & 0xFFFFFFFF)
        _, first = np.unique(code, return_index=True)  # a stable sort: the first row of each pair
        del code
        out = np.zeros(int(q.sum()), dtype=bool)
        out[first] = True
        return out

    def chunks(self) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
        """(rows the jobs query, rejected rows) as `load_rows` gives them, a chunk at a
        time; once."""
        names = np.array((None, *reject_reasons()), dtype=object)
        staged_chunks = [self._only] if self._only is not None else _staged_chunks(self.settings, self.path, self.chunk_rows)
        self._only = None
        at = 0
        for i, staged in enumerate(staged_chunks):
            if i >= len(self.chunk_sizes) or len(staged) != self.chunk_sizes[i]:
                raise StudyConfigError(f"setting 'data_path': '{self.path}' changed while it was read; run again")
            end = at + len(staged)
            staged["reject_reason"] = names[self.reason[at:end].astype(np.int64) + 1]
            staged["in_subsample"] = self.queried[at:end]  # valid and in the subsample, as staged
            at = end
            rows, rejects = split_staged(staged)
            yield arrow_text(rows), arrow_text(rejects)
        if at != self.n:
            raise StudyConfigError(f"setting 'data_path': '{self.path}' changed while it was read; run again")


def scan_rows(settings: InputSettings, path: Path, chunk_rows: int | None = None) -> RowScan:
    """The first pass of :class:`RowScan` over the study's input file.

    A row's reasons across rows need the rows that share its row_id, and those are found
    without a hash table of every id: each id's 64-bit hash is sorted, and only the rows
    whose hash repeats (every repeated id, and any rare collision) have their ids compared
    exactly, by the same functions `stage_rows` runs on the whole file."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    code = {name: i for i, name in enumerate(reject_reasons())}
    ids: list[pa.Array] = []
    hashes: list[np.ndarray] = []
    given: list[np.ndarray] = []
    number: list[np.ndarray] = []
    reason: list[np.ndarray] = []
    entity: list[np.ndarray] = []
    entity_code: dict[str, int] = {}
    target: list[np.ndarray] = []
    sizes: list[int] = []
    only: pd.DataFrame | None = None
    for staged in _staged_chunks(settings, path, chunk_rows):
        sizes.append(len(staged))
        only = staged if len(sizes) == 1 else None
        row_id = staged["row_id"].to_numpy(dtype=object)
        ids.append(pa.array(row_id, type=pa.string(), from_pandas=True))
        hashes.append(pd.util.hash_array(row_id))
        given.append(~staged["row_id_derived"].to_numpy(bool))
        number.append(staged["outcome"].to_numpy(float))
        reason.append(staged["reject_reason"].map(code).fillna(-1).to_numpy(np.int8))
        entity.append(_global_codes(staged["entity_id"], entity_code))
        target.append(_days(staged["target_date"]))
        del staged, row_id  # a chunk's cells as Python strings go with the chunk (unless it is the only one)
        release_freed_memory()  # and are given back: else each chunk's leftovers add up to the file's size
    row_ids = pa.chunked_array(ids, type=pa.string())
    all_hashes = np.concatenate(hashes)
    hashes.clear()
    shared = _repeated(all_hashes)  # rows whose id may repeat, in file order
    del all_hashes
    reasons = np.concatenate(reason)
    reason.clear()
    if shared.size:
        id_of = pd.Series(row_ids.take(pa.array(shared)).to_pylist(), dtype=object)
        # a row_id column that repeats a value: the error names it and its rows
        _require_unique_ids(id_of.where(_take(given, shared), None), pd.Series(shared + 1), dict(settings.column_map or {}))
        outcome = pd.Series(_take(number, shared))
        sub = pd.Series(reasons[shared])
        sub[_conflicting(id_of, outcome, sub < 0).to_numpy(bool)] = code["conflicting outcome"]
        sub[_later_duplicates(id_of, sub < 0).to_numpy(bool)] = code["duplicate row"]
        reasons[shared] = sub.to_numpy(np.int8)
    given.clear()
    number.clear()
    valid = reasons < 0
    size, seed = _subsample_setting(settings)
    if size is None or size >= int(valid.sum()):
        queried = valid
    else:
        queried = _subsample_mask(pd.Series(row_ids.to_pandas(), dtype=object), pd.Series(valid), size, seed).to_numpy(bool)
    values = pa.array(list(entity_code), type=pa.string())
    return RowScan(
        settings,
        path,
        chunk_rows,
        int(sum(sizes)),
        reasons,
        queried,
        np.concatenate(entity),
        values,
        np.concatenate(target),
        sizes,
        only,
    )


def _take(chunks: list[np.ndarray], at: np.ndarray) -> np.ndarray:
    """The values at positions ``at`` of the chunks laid end to end (no copy of them all)."""
    starts = np.cumsum([0] + [len(c) for c in chunks])
    which = np.searchsorted(starts, at, side="right") - 1  # ``at`` ascends: so do the chunks
    return np.concatenate([chunks[w][at[which == w] - starts[w]] for w in np.unique(which)])


def _repeated(hashes: np.ndarray) -> np.ndarray:
    """Positions (ascending) of the values that occur more than once."""
    ranked = np.sort(hashes)
    twice = np.unique(ranked[1:][ranked[1:] == ranked[:-1]])
    del ranked
    return np.flatnonzero(np.isin(hashes, twice))


#: The day of a row without a target date (never queried, so never compared).
NO_DAY = np.iinfo(np.int32).max


def _days(dates: pd.Series) -> np.ndarray:
    """Dates at midnight as int32 days since 1970 (NO_DAY for NaT): half an int64 a row."""
    days = dates.to_numpy("datetime64[D]")
    return np.where(np.isnat(days), NO_DAY, days.view(np.int64)).astype(np.int32)


def _global_codes(values: pd.Series, codes: dict[str, int]) -> np.ndarray:
    """Each value's code in ``codes`` (extended with values not seen before; -1 for
    missing): one code space for every chunk, held per distinct value, not per row."""
    arr = pa.array(values.to_numpy(dtype=object), type=pa.string(), from_pandas=True)
    enc = pc.dictionary_encode(arr)
    local = np.array([codes.setdefault(v, len(codes)) for v in enc.dictionary.to_pylist()] + [-1], dtype=np.int32)
    return local[pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False)]


def arrow_text(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with each text column held as Arrow strings (pandas' ArrowDtype): a Python
    string a cell was most of a large study's rows in memory (about 550 bytes a row of the
    synthetic study, against a few dozen as Arrow). A column Arrow cannot hold as text is
    left as it is."""
    out = {}
    for name in rows.columns:
        col = rows[name]
        if col.dtype == object or isinstance(col.dtype, pd.StringDtype):
            with contextlib.suppress(pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
                col = col.astype(pd.ArrowDtype(pa.string()))
        out[name] = col
    return pd.DataFrame(out, index=rows.index)


def stage_observations(settings: InputSettings, data_path: Path) -> pd.DataFrame:
    """Read the study's input file and stage it (``stage_rows``).

    A header-only file stages as zero rows: the jobs stop on it with one line, and dbt
    stops at the singular test tests/dbt/assert_input_has_data_rows.sql."""
    df = read_table(data_path, settings.csv_delimiter)
    return stage_rows(df, settings, source=str(data_path))


# ----------------------------------------------------------------------------- jobs


def load_rows(study: Study, subsample: tuple[int | None, int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows the jobs query, rejected rows with `reject_reason`) under protocol column names.

    The rows are the valid rows in the subsample (``subsample`` = (N, seed) overrides the
    study's subsample_rows/subsample_seed, as the jobs' --subsample/--seed flags do).
    Dates are ``YYYY-MM-DD`` text, outcome a float, empty cells '' (prompts may use any
    input column as a placeholder, so all user columns are kept); text columns are Arrow
    strings (:func:`arrow_text`), the file read a chunk at a time (:func:`scan_rows`)."""
    rows, rejects = zip(*scan_study_rows(study, subsample).chunks(), strict=False)
    return pd.concat(rows, ignore_index=True), pd.concat(rejects, ignore_index=True)


def scan_study_rows(study: Study, subsample: tuple[int | None, int] | None = None) -> RowScan:
    """:func:`scan_rows` of the study's input file (``subsample`` as in `load_rows`); a
    header-only file stops here with one line."""
    settings = study.input
    if subsample is not None:
        settings = replace(settings, subsample_rows=subsample[0], subsample_seed=subsample[1])
    scan = scan_rows(settings, study.data_file)
    if scan.n == 0:
        raise StudyConfigError(f"setting 'data_path': '{study.input.data_path}' has a header but no data rows; check the file")
    return scan


#: Staged columns that only decide the split: the rows the jobs query lack them.
SPLIT_COLUMNS = ("reject_reason", "in_subsample")
#: Staged columns kept as they are (not text) in the rows the jobs query.
NON_TEXT_COLUMNS = ("source_row_number", "row_id_derived", "outcome", *SPLIT_COLUMNS)
#: How the rows the jobs query write a date (text_date, target_date).
DATE_TEXT_FORMAT = "%Y-%m-%d"
DATE_COLUMNS = ("text_date", "target_date")


def queried(staged: pd.DataFrame) -> pd.Series:
    """Which staged rows the jobs query: valid (no reject reason) and in the subsample."""
    return staged["reject_reason"].isna() & staged["in_subsample"].astype(bool)


def split_staged(staged: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`load_rows` from rows `stage_observations` staged (or dbt's stg_observations,
    which stores them): a build keys the rows staging already read instead of reading
    the file again. `staged` is the caller's to give up: its date and text columns are
    rewritten in place (both callers pass a frame of their own; a copy of every row
    would double the step's memory on a large study)."""
    for c in DATE_COLUMNS:
        staged[c] = staged[c].dt.strftime(DATE_TEXT_FORMAT).where(staged[c].notna(), None)
    keep = queried(staged)
    text_cols = [c for c in staged.columns if c not in NON_TEXT_COLUMNS]
    staged[text_cols] = staged[text_cols].where(staged[text_cols].notna(), "")
    rows = staged[keep]
    rows = rows.drop(columns=list(SPLIT_COLUMNS)).reset_index(drop=True)
    rejects = staged[staged["reject_reason"].notna()].reset_index(drop=True)
    return rows, rejects


def split_staged_arrow(staged: pa.Table) -> pa.Table:
    """The rows of `split_staged` from an Arrow table of (some of) the staged columns:
    what a build keys, without a Python object per value. Dates are written by the same
    format and missing text is empty text, as in `split_staged`."""
    keep = queried(staged.select(list(SPLIT_COLUMNS)).to_pandas()).to_numpy(bool)
    columns = {}
    for name in staged.column_names:
        if name in SPLIT_COLUMNS:
            continue
        col = staged[name]
        if name in DATE_COLUMNS:  # formatted once per distinct date: strftime per row is slow
            codes = pc.dictionary_encode(col.combine_chunks())
            col = pc.take(pc.strftime(codes.dictionary, format=DATE_TEXT_FORMAT), codes.indices)
        if name not in NON_TEXT_COLUMNS and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = pc.fill_null(col, "")
        columns[name] = col
    return pa.table(columns).filter(pa.array(keep))


def release_freed_memory() -> None:
    """Give the memory freed so far back to the system. Arrow's pool and the C allocator keep
    freed pages for reuse, so a process that staged a million rows (or planned their
    queries) held the peak of that step for the rest of its run, on top of what the next
    step needs, or beside a child process that stages them again (`lookahead check`)."""
    import ctypes

    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def subsample_rows(rows: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """A seeded random subsample of valid rows (the rule of ``subsample_rows``)."""
    if n <= 0:
        raise StudyConfigError(f"--subsample {n}: must be a positive number of rows")
    mask = _subsample_mask(rows["row_id"], pd.Series(True, index=rows.index), n, seed)
    return rows[mask].reset_index(drop=True)


PAIR_KEY = ["entity_id", "target_date"]
#: A recall query's values: the pair and what its prompt may name.
PAIR_COLUMNS = ("entity_id", "entity_name", "ticker", "target_date")


def unique_pairs(rows: pd.DataFrame | pa.Table) -> pd.DataFrame | pa.Table:
    """One row per (entity_id, target_date), the first in row order: the recall query's
    unit (protocol step 2). An Arrow table of rows gives an Arrow table."""
    cols = list(PAIR_COLUMNS)
    if isinstance(rows, pa.Table):
        first = ~rows.select(PAIR_KEY).to_pandas(types_mapper=pd.ArrowDtype).duplicated(keep="first")
        return rows.select(cols).filter(pa.array(first.to_numpy(bool)))
    return rows.loc[~rows.duplicated(PAIR_KEY, keep="first"), cols].reset_index(drop=True)
