"""The project's dbt-duckdb plugin: package functions dbt's SQL and Jinja can call.

dbt's run-start check must apply the same settings rules as the jobs, not a second copy
in Jinja, so the plugin registers :func:`lookahead.config.check_dbt_vars` as a DuckDB
scalar function (``lookahead_check_settings``) and the declared setting names as
``lookahead_setting_names``; macros/check_inputs.sql calls both. The model
`study_settings` stores the resolved settings (``lookahead_study_json``) and
`build_identity` fingerprints the input file and each task's cache (``lookahead_fingerprint``,
``lookahead_cache_fingerprint``), all files the build reads (``lookahead_inputs_fingerprint``)
and the code (``lookahead_code_fingerprint``).
profiles/profiles.yml loads the plugin.

The plugin also opens the study's database: the profile is the same for every study (an
in-memory primary and the alias ``study``), and the plugin attaches the study's file under
that alias before dbt-duckdb's own ``ATTACH IF NOT EXISTS`` (which then finds it). The study
comes from `--vars`, else from the settings file the `lookahead` command names in
$LOOKAHEAD_STUDY_SETTINGS, else the default study (:func:`lookahead.config.dbt_study`);
models read its settings at run time through ``lookahead_setting`` (macros/settings.sql).
Why: dbt re-parses the whole project when the profile or `--vars` change, and both used to
carry the study (docs/CONTRACTS.md, "How a study reaches dbt").

A build that runs a gate starts the gates' Great Expectations in a process of its own as it
starts (:func:`_start_gate_worker_udf`, lookahead.gates.worker).

The plugin also keeps Python's garbage collector off dbt's long-lived objects (see
:func:`_freeze_long_lived`) and hands the memory a node freed back to the system before the
next node starts (lookahead.memory: `release_free_memory`, `limit_malloc_arenas`), and sizes
DuckDB's thread pool to the cores each of dbt's threads has (:func:`duckdb_threads`)."""

from __future__ import annotations

import atexit
import functools
import gc
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbt.adapters.duckdb.plugins import BasePlugin

from lookahead.memory import limit_malloc_arenas, release_free_memory

if TYPE_CHECKING:
    from lookahead.config import Study

#: The catalog every dbt node lives in (profiles/profiles.yml: database and attach alias).
STUDY_CATALOG = "study"


def _setting_names() -> str:
    from lookahead.config import SCHEMA

    return ",".join(SCHEMA.names())


def _check_settings(dbt_values_json: str, cli_vars: str) -> str:
    """The run-start check's one line: a bad setting, else a memory limit the database
    could not take (size_buffer_pool), else ''."""
    from lookahead.config import check_dbt_vars

    return check_dbt_vars(dbt_values_json, cli_vars) or _output_folder_error() or next(iter(_BUFFER_POOL_ERRORS), "")


def _output_folder_error() -> str:
    """lookahead.artefacts.check_output_folders for the build's study, as one line ('' when
    the folders are fine or a setting is bad: check_dbt_vars reports that first)."""
    from lookahead.artefacts import OutputFolderError, check_output_folders

    try:
        check_output_folders(build_study())
    except OutputFolderError as err:
        return str(err)
    except ValueError:  # StudyConfigError: the settings check says it
        return ""
    return ""


def _retire_report(invocation_id: str) -> str:
    """Retire the study's report set (lookahead.artefacts) as a build starts: a plain
    `dbt build`, with or without --vars, leaves no report that reads as its result, as
    `lookahead build` does. Returns how many files moved (text for the hook's query)."""
    from lookahead.artefacts import retire_study

    moved = retire_study(build_study(), f"a dbt build (invocation {invocation_id}) started after they were written")
    return str(len(moved))


def _cli_vars() -> dict[str, Any]:
    """This dbt invocation's `--vars` ({} without them)."""
    from dbt.flags import get_flags

    return dict(getattr(get_flags(), "VARS", None) or {})


@functools.lru_cache(maxsize=8)
def _resolved(cli_vars_json: str, settings_file: str) -> Study:
    """The study for these --vars and this $LOOKAHEAD_STUDY_SETTINGS (the arguments key the
    cache, so each dbt invocation of a process gets its own)."""
    from lookahead.config import dbt_study

    return dbt_study(json.loads(cli_vars_json))


def build_study() -> Study:
    """The study this dbt invocation builds (lookahead.config.dbt_study); raises
    StudyConfigError for a bad setting, which the run-start check reports first."""
    from lookahead.config import STUDY_SETTINGS_ENV

    return _resolved(json.dumps(_cli_vars(), sort_keys=True, default=str), os.environ.get(STUDY_SETTINGS_ENV, ""))


def _study_json() -> str:
    return build_study().settings_json()


def _setting(name: str) -> str:
    """One setting of the build's study as JSON (macros/settings.sql reads it)."""
    return json.dumps(build_study().vars[name], default=str)


def _setting_path(name: str) -> str:
    """A path setting of the build's study as JSON, resolved against the project folder
    when relative (Study.resolve, as every lookahead command resolves it; null when not
    set): macros/settings.sql's setting_path. DuckDB would read a relative path from the
    working folder, which `dbt build --project-dir <project>` leaves wherever the user is."""
    study = build_study()
    value = study.vars[name]
    return json.dumps(None if value in (None, "") else str(study.resolve(value)))


def _study_name() -> str:
    """The build's study name, also when a setting is bad (lookahead.config.dbt_study_name)."""
    from lookahead.config import dbt_study_name

    return dbt_study_name(_cli_vars())


def _study_source() -> str:
    """Where the build's study came from (lookahead.collision.study_source), for build_log."""
    from lookahead.collision import study_source

    return study_source(_cli_vars())


def _collision(stored_name: str, stored_source: str, stored_hash: str, stored_identity: str) -> str:
    """'' or the run-start line stopping a build over another study's results
    (lookahead.collision: the database's last build against this one)."""
    from lookahead.collision import BuildIdentity, collision_line
    from lookahead.config import database_path

    study = build_study()
    return collision_line(
        str(database_path(study.name)),
        BuildIdentity(stored_name, stored_source, stored_hash, stored_identity),
        BuildIdentity(study.name, _study_source(), study.settings_hash, study.identity_hash),
    )


def _identity_hash() -> str:
    """The build's study identity (lookahead.config.Study.identity_hash), for build_log."""
    return build_study().identity_hash


def _identity_is_current(settings_hash: str, inputs: str, code: str, raw_reads_json: str | None) -> bool:
    """Whether a build identity (build_identity's row) describes the study, its files and
    the code as they are now: the nodes a selected build did not rebuild are then current
    (macros/build_log.sql, mark_verdict). Here any line written to raw_dir since counts
    (no key lookup inside on-run-end): a selection is rebuilt rather than trusted."""
    from lookahead import raw_reads
    from lookahead.identity import code_fingerprint, inputs_fingerprint

    study = build_study()
    recorded = raw_reads.from_json(raw_reads_json)
    return (
        settings_hash == study.settings_hash
        and inputs == inputs_fingerprint(study)
        and code == code_fingerprint()
        and recorded is not None
        and not raw_reads.changes(study.raw_dir, recorded, lambda keys: keys)
    )


def _raw_reads(raw_dir: str) -> str:
    """What the build reads under raw_dir (lookahead.raw_reads.record), as JSON."""
    from lookahead import raw_reads
    from lookahead.identity import fingerprint

    return raw_reads.to_json(raw_reads.record(raw_dir, lambda f: fingerprint(f).removeprefix("sha256:")))


def _sql_text(value: str) -> str:
    """A value as a DuckDB string literal (quotes doubled; DuckDB reads a backslash as
    itself): the one way the plugin writes a value into SQL it cannot bind."""
    return "'" + value.replace("'", "''") + "'"


_GLOB_SPECIAL = re.compile(r"([*?\[{}])")


def glob_literal(path: str) -> str:
    """A path as a DuckDB file pattern that matches that path only.

    Why: DuckDB's file readers (read_csv, read_json, read_blob, glob) expand `*`, `?`,
    `[...]` and `{...}` in any path they are given, so a folder named `a*` would read
    every study's folder beginning with `a`; each such character becomes a one-character
    class (`[*]`). A backslash cannot be matched at all, so the settings loader refuses
    it in a path (lookahead/untrusted.py)."""
    return _GLOB_SPECIAL.sub(r"[\1]", path)


def observations_sql(data_path: str, csv_delimiter: str | None) -> str:
    """The DuckDB table function reading the study's observations file (the `study`
    source: the run-start checks on its columns and dbt's lineage; stg_observations reads
    it with lookahead.rows). CSV is read as text, with the study's delimiter or sniffed."""
    if data_path.lower().endswith((".parquet", ".pq")):
        return f"read_parquet({_sql_text(glob_literal(data_path))})"
    delim = "" if not csv_delimiter else ", delim=" + _sql_text("\t" if csv_delimiter == "tab" else csv_delimiter)
    return f"read_csv({_sql_text(glob_literal(data_path))}, all_varchar=true, header=true{delim})"


def use_study(cursor: Any) -> None:
    """Point a DuckDB connection or cursor at the build's study: its catalog as the default
    (unqualified names such as main.verdict), and the variable lookahead_study
    (STUDY_VARIABLE: what the sources, the key checks and the run-start checks read, each
    field named in STUDY_FIELDS), its paths resolved against the project folder as the
    package resolves them (Study.resolve), so dbt reads the same files from any working
    folder. Variables are per connection, so every cursor gets it; with a bad setting
    every field is null: the run-start check stops the build first.

    Why a variable and not a temporary table macro: DuckDB binds a table macro's body when
    the macro is created, which sniffs the CSV (about 90 ms at 91,361 rows), and dbt opens
    a cursor for every node and data test: a build spent about 24 CPU-seconds creating
    macros that one or two nodes call. Setting a variable binds nothing. Why one struct
    and not a variable per field: each statement costs DuckDB about a quarter of a
    millisecond, paid on every cursor: a variable per field took 2.8 ms of CPU a cursor,
    the struct 0.7 ms (benchmarks/bench_study_variable.py)."""
    cursor.execute(f"use {STUDY_CATALOG}")
    # bound parameters: a setting is a value here, never SQL text (docs/SECURITY.md)
    cursor.execute(f"set variable {STUDY_VARIABLE} = cast(? as {_STUDY_TYPE})", [_study_fields()])


#: The variable holding the build's study for SQL: `getvariable('lookahead_study').raw_dir`.
STUDY_VARIABLE = "lookahead_study"


#: The prompt-scoring tasks whose lines may carry extras or an older key.
LINE_VARIABLE_TASKS = ("mink",)


def _prompt_scoring_fields() -> dict[str, str]:
    from lookahead.tasks import TASKS

    fields = {f"key_params_{task}": "VARCHAR" for task in TASKS}
    for task in LINE_VARIABLE_TASKS:
        fields[f"legacy_key_params_{task}"] = "VARCHAR[]"
        fields[f"line_needs_{task}"] = "VARCHAR[]"
    return fields


#: The fields of lookahead_study and their DuckDB types:
#: - raw_dir: the jobs' raw folder (the raw sources), as a file pattern (glob_literal);
#: - claims_raw_dir: the claim jobs' raw folder (the claims_raw source:
#:   lookahead.claims.inputs.claims_raw_dir);
#: - data_path, observations_sql: the observations file and the query reading it (the
#:   `study` source runs it with DuckDB's query(); null in a claim-only study);
#: - key_params_<task>: the canonical params JSON the study's keys of that task hash
#:   (macros/study_helpers.sql `fields_match` recomputes each raw line's key with it);
#: - legacy_key_params_<task>: the params JSON a prompt-scoring task's lines were keyed
#:   with before the key stood for the forward pass alone (lookahead.keys.legacy_key_params):
#:   `fields_match` accepts a line hashing to one of them;
#: - line_needs_<task>: the extras the study's measures need in that task's lines
#:   (lookahead.measures.line_extras): a line carrying them wins (first_written_line).
STUDY_FIELDS: dict[str, str] = {
    "raw_dir": "VARCHAR",
    "claims_raw_dir": "VARCHAR",
    "data_path": "VARCHAR",
    "observations_sql": "VARCHAR",
    **_prompt_scoring_fields(),
}
_STUDY_TYPE = "STRUCT(" + ", ".join(f"{name} {kind}" for name, kind in STUDY_FIELDS.items()) + ")"


def _study_fields() -> dict[str, Any]:
    """lookahead_study's value for the build's study (every field null when a setting is
    bad: the run-start check names it), computed once per resolved study (build_study's)."""
    try:
        study = build_study()
    except ValueError:  # StudyConfigError
        return dict.fromkeys(STUDY_FIELDS)
    hit = _FIELDS.get(id(study))
    if hit is None or hit[0] is not study:  # the study kept beside its fields: an id is not reused while held
        if len(_FIELDS) >= 8:
            _FIELDS.clear()
        hit = _FIELDS[id(study)] = (study, _fields_of(study))
    return hit[1]


#: id(study) -> (study, its lookahead_study value): what dbt's threads read on each cursor.
_FIELDS: dict[int, tuple[Study, dict[str, Any]]] = {}


def _fields_of(study: Study) -> dict[str, Any]:
    from lookahead.claims.inputs import claims_raw_dir

    fields: dict[str, Any] = dict.fromkeys(STUDY_FIELDS)
    fields["raw_dir"] = glob_literal(str(study.raw_dir))
    fields["claims_raw_dir"] = glob_literal(str(claims_raw_dir(study)))
    if study.input.data_path:  # a claim-only study (study_kind: claims) has no observations file
        data_path = str(study.resolve(study.input.data_path))
        fields["data_path"] = glob_literal(data_path)
        fields["observations_sql"] = "select * from " + observations_sql(data_path, study.input.csv_delimiter)
    for task, params in key_params(study).items():
        fields[f"key_params_{task}"] = params
    for task, lines in line_variables(study).items():
        fields.update({f"{name}_{task}": values for name, values in lines.items()})
    return fields


def key_params(study: Study) -> dict[str, str]:
    """task -> the canonical params JSON the study's keys of that task hash
    (lookahead.keys.task_params); a task whose params a bad setting prevents is left
    out (its lines then match no key, and the run-start check names the setting)."""
    from lookahead.keys import params_json, task_params
    from lookahead.tasks import TASKS

    out = {}
    for task in TASKS:
        try:
            out[task] = params_json(task_params(study, task))
        except ValueError:  # StudyConfigError
            continue
    return out


def line_variables(study: Study) -> dict[str, dict[str, list[str]]]:
    """task -> {field prefix: values} for the prompt-scoring tasks: the legacy key params
    and the extras the study needs ([] when none); a task a bad setting prevents is left
    out (the run-start check names the setting)."""
    from lookahead.keys import legacy_key_params
    from lookahead.measures import line_extras

    out = {}
    for task in LINE_VARIABLE_TASKS:
        try:
            out[task] = {"legacy_key_params": legacy_key_params(study, task), "line_needs": line_extras(study, task)}
        except ValueError:  # StudyConfigError
            continue
    return out


#: Overrides the buffer pool's size (any DuckDB memory size, e.g. 8GB).
MEMORY_LIMIT_ENV = "LOOKAHEAD_DUCKDB_MEMORY_LIMIT"
#: DuckDB's buffer pool, in MB: MEMORY_LIMIT_PER_MILLION_ROWS_MB for each million input
#: rows, never under MEMORY_LIMIT_BASE_MB (memory_limit).
#: Why bounded at all: DuckDB's default is 80% of RAM, which the dbt Python models running
#: in the same process then compete with, and DuckDB keeps what it read and wrote in the
#: pool up to the limit (at 1,000,000 rows 640MB took the build's peak from 2,215 to 1,865
#: MiB against 1GB, benchmarks/HISTORY.md).
#: Why it grows with the rows: int_panel_merged holds a hash table per LAP measure at once
#: while it joins them to the rows; on its own it needed 400-480 MB at 1,000,000 rows, and
#: a fixed 640MB stopped the 10,000,000-row build with DuckDB's out-of-memory error, where
#: 4GB was enough (BENCHMARKS.md, issue 26).
MEMORY_LIMIT_BASE_MB = 640
MEMORY_LIMIT_PER_MILLION_ROWS_MB = 480
#: The share of the machine's memory the pool never exceeds (DuckDB's own default).
MEMORY_LIMIT_RAM_SHARE = 0.8


def memory_limit(n_rows: int, machine_bytes: int | None = None) -> str:
    """DuckDB's memory_limit for a study of `n_rows` input rows on a machine with
    `machine_bytes` of memory: MEMORY_LIMIT_PER_MILLION_ROWS_MB a million rows, at least
    MEMORY_LIMIT_BASE_MB, at most MEMORY_LIMIT_RAM_SHARE of the memory (never below the
    base: a smaller machine gets the limit every study had before)."""
    mb = max(MEMORY_LIMIT_BASE_MB, -(-MEMORY_LIMIT_PER_MILLION_ROWS_MB * n_rows // 1_000_000))
    if machine_bytes:
        mb = min(mb, max(MEMORY_LIMIT_BASE_MB, int(MEMORY_LIMIT_RAM_SHARE * machine_bytes / 1e6)))
    return f"{mb}MB"


def sized_memory_limit(data_path: Path | str) -> str:
    """`memory_limit` for the rows of this input file on this machine: what the plugin sets
    without $LOOKAHEAD_DUCKDB_MEMORY_LIMIT (the benchmarks record it from here too)."""
    from lookahead.rows import count_data_rows

    return memory_limit(count_data_rows(Path(data_path)), ram_bytes())


def ram_bytes() -> int | None:
    """The machine's physical memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return None


def size_buffer_pool(conn: Any) -> str:
    """Set DuckDB's memory_limit for the build's study ($LOOKAHEAD_DUCKDB_MEMORY_LIMIT
    when set, else `memory_limit` of its input file's rows) on the connection; return the
    value set, which configure_cursor sets again on every cursor (_BUFFER_POOL). With a
    bad setting the base limit: the run-start check stops the build first."""
    import duckdb

    try:
        study = build_study()
    except ValueError:  # StudyConfigError
        sized = memory_limit(0)
    else:  # a claim-only study has no observations file: the base limit
        sized = sized_memory_limit(study.resolve(study.input.data_path)) if study.input.data_path else memory_limit(0)
    value = os.environ.get(MEMORY_LIMIT_ENV) or sized
    try:
        conn.execute(f"set memory_limit = {_sql_text(value)}")
    except duckdb.Error as err:  # dbt would print a traceback: the run-start check says it
        _BUFFER_POOL_ERRORS[:] = [
            f"${MEMORY_LIMIT_ENV}={value!r} is not a memory size DuckDB reads (e.g. 8GB): {str(err).splitlines()[0]}"
        ]
        conn.execute(f"set memory_limit = {_sql_text(sized)}")
        return sized
    _BUFFER_POOL_ERRORS.clear()
    return value


#: The memory_limit size_buffer_pool chose for this process's database, which every cursor
#: sets again (configure_cursor) as the profile's settings did when they held the limit:
#: set once per connection instead, builds peaked 56-146 MiB above 122de87's at 91,361
#: rows and 100-198 MiB at 1,000,000; set on every cursor, 0-73 MiB at 91,361
#: (alternating builds, BENCHMARKS.md).
_BUFFER_POOL: list[str] = []
#: Why $LOOKAHEAD_DUCKDB_MEMORY_LIMIT was not used, for the run-start check (_check_settings).
_BUFFER_POOL_ERRORS: list[str] = []


def attach_study(conn: Any) -> None:
    """Attach the build's database (outputs/<study_name>.duckdb, lookahead.config.database_path)
    as catalog `study`, with DuckDB's spill files beside it (<database>.tmp, DuckDB's
    default for a database file; an in-memory primary would spill to .tmp in the working
    directory)."""
    from lookahead.config import database_path

    db = str(database_path(_study_name()))
    conn.execute(f"attach if not exists {_sql_text(db)} as {STUDY_CATALOG}")
    conn.execute(f"set temp_directory = {_sql_text(db + '.tmp')}")


def _settings_hash(settings_json: str) -> str:
    from lookahead.config import Study

    return Study.from_json(settings_json).settings_hash


def _fingerprint(path: str) -> str:
    from lookahead.identity import fingerprint

    return fingerprint(path)


def _inputs_fingerprint(settings_json: str) -> str:
    from lookahead.config import Study
    from lookahead.identity import inputs_fingerprint

    return inputs_fingerprint(Study.from_json(settings_json))


def _code_fingerprint() -> str:
    from lookahead.identity import code_fingerprint

    return code_fingerprint()


def _cache_fingerprint(raw_dir: str, task: str) -> str:
    from lookahead.identity import cache_fingerprint

    return cache_fingerprint(raw_dir, task)


def _verdict_mark(kind: str) -> str:
    """The verdict row's result_status text for 'complete' or 'stale: <why>'
    (lookahead.identity: one home for the words)."""
    from lookahead import identity

    return identity.COMPLETE if kind == "complete" else identity.STALE + kind


def _has_claims() -> bool:
    """Whether the build's study has claim settings (lookahead.claims.inputs.has_claims):
    without them, macros/build_log.sql drops the claim tables an earlier build left."""
    from lookahead.claims.inputs import has_claims

    return has_claims(build_study())


def _result_tables() -> str:
    from lookahead.identity import RESULT_TABLES

    return ",".join(RESULT_TABLES)


def _freeze_long_lived() -> None:
    """Move every object alive now out of the garbage collector's reach (gc.freeze).

    A build's process holds millions of objects that live until it exits (dbt's parsed
    project, the imported libraries), and every full collection walks all of them:
    0.2-0.3 s each, about ten times during a build, and several times more while the
    interpreter shuts down (2.4-2.7 s measured at 91,361 rows, benchmarks/HISTORY.md). Called
    when dbt opens the database (the project is parsed by then) and again at exit;
    frozen objects are simply never collected, which for objects that live until the
    process ends changes nothing but the time."""
    gc.freeze()


atexit.register(_freeze_long_lived)


def use_system_arrow_pool() -> None:
    """Arrow buffers made in the dbt process from now on come from the C library's malloc.

    Why: pyarrow's default pool (mimalloc) keeps the memory of freed buffers for reuse,
    and the dbt Python models make large short-lived ones (pandas' string columns, the
    input rows staged through Arrow), so the process kept that memory through the rest
    of the build; malloc hands large blocks back when they are freed. Measured on the
    91,361-row study: `dbt build`'s peak RSS 770 -> 753 MiB (medians of 2), the same
    tables."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def _start_gate_worker_udf(gates: str) -> bool:
    """The SQL function lookahead_start_gate_worker(gates): starts the gates' Great
    Expectations in a process of its own (lookahead.gates.worker says why) for the gate
    models named (comma-separated), in a `dbt build` or `dbt run`; the build_log's
    run-start hook calls it when dbt selected a gate_ model. Only for such a selection: a
    claim study's build (`--select +tag:claims`) or `dbt run --select <mart>` would
    otherwise import it for nothing."""
    from dbt.flags import get_flags

    if getattr(get_flags(), "WHICH", None) in ("build", "run"):
        from lookahead.gates import worker

        worker.start(gates.split(","))
    return True


def cores() -> int:
    """The CPUs this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def duckdb_threads(dbt_threads: int | None, n_cores: int | None = None) -> int:
    """DuckDB's threads for a build that runs `dbt_threads` nodes at once: the cores each
    node has, cores // dbt_threads, at least 1 (`dbt --threads` overrides the profile's
    count, and is used when given).

    Why: DuckDB's default is a thread per core for every query, and dbt runs two queries
    at once, so on two cores four threads shared two, with Python (dbt, the Python
    models, the Great Expectations import) on the same cores. With one thread a query,
    the 91,361-row build took 0.88x the CPU time and 0.89x the wall time it took with
    DuckDB's default, and at 1,000,000 rows 0.91x the CPU and the same wall (alternating
    builds, BENCHMARKS.md, "DuckDB's threads")."""
    from dbt.flags import get_flags

    n = getattr(get_flags(), "THREADS", None) or dbt_threads or 1
    return max(1, (n_cores or cores()) // max(1, int(n)))


class Plugin(BasePlugin):
    def initialize(self, plugin_config: dict[str, Any]) -> None:
        # dbt's thread count from the profile (its plugin config repeats `threads` by a YAML anchor)
        self.dbt_threads: int | None = int(plugin_config["dbt_threads"]) if plugin_config.get("dbt_threads") else None
        limit_malloc_arenas()
        use_system_arrow_pool()

    def configure_cursor(self, cursor: Any) -> None:
        release_free_memory()
        if _BUFFER_POOL:  # on every cursor, as a profile's settings are (_BUFFER_POOL says why)
            cursor.execute(f"set memory_limit = {_sql_text(_BUFFER_POOL[0])}")
        use_study(cursor)

    def configure_connection(self, conn: Any) -> None:
        _freeze_long_lived()
        _BUFFER_POOL[:] = [size_buffer_pool(conn)]
        conn.execute(f"set threads = {duckdb_threads(self.dbt_threads)}")
        attach_study(conn)
        conn.create_function("lookahead_start_gate_worker", _start_gate_worker_udf, ["VARCHAR"], "BOOLEAN", side_effects=True)
        conn.create_function("lookahead_setting_names", _setting_names, [], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_check_settings", _check_settings, ["VARCHAR", "VARCHAR"], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_retire_report", _retire_report, ["VARCHAR"], "VARCHAR", side_effects=True)
        conn.create_function("lookahead_study_json", _study_json, [], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_setting", _setting, ["VARCHAR"], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_setting_path", _setting_path, ["VARCHAR"], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_study_name", _study_name, [], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_study_source", _study_source, [], "VARCHAR", side_effects=False)
        conn.create_function(
            "lookahead_identity_is_current",
            _identity_is_current,
            ["VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR"],
            "BOOLEAN",
            side_effects=True,
            null_handling="special",
        )
        conn.create_function("lookahead_raw_reads", _raw_reads, ["VARCHAR"], "VARCHAR", side_effects=True)
        conn.create_function(
            "lookahead_study_collision", _collision, ["VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR"], "VARCHAR", side_effects=False
        )
        conn.create_function("lookahead_identity_hash", _identity_hash, [], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_settings_hash", _settings_hash, ["VARCHAR"], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_result_tables", _result_tables, [], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_has_claims", _has_claims, [], "BOOLEAN", side_effects=False)
        conn.create_function("lookahead_verdict_mark", _verdict_mark, ["VARCHAR"], "VARCHAR", side_effects=False)
        conn.create_function("lookahead_fingerprint", _fingerprint, ["VARCHAR"], "VARCHAR", side_effects=True)
        conn.create_function("lookahead_inputs_fingerprint", _inputs_fingerprint, ["VARCHAR"], "VARCHAR", side_effects=True)
        conn.create_function("lookahead_code_fingerprint", _code_fingerprint, [], "VARCHAR", side_effects=True)
        conn.create_function(
            "lookahead_cache_fingerprint", _cache_fingerprint, ["VARCHAR", "VARCHAR"], "VARCHAR", side_effects=True
        )
