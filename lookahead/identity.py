"""A build's identity, and the check that a result belongs to the study as it is now.

A verdict is only worth quoting for the inputs, answers and settings it was computed
from. `dbt build` records them in `build_identity` (dbt invocation id, study name,
settings hash, fingerprints of the input file and of each raw file) and copies them into
the `verdict` row; on-run-end (macros/build_log.sql) records whether the build passed in
`build_log` and, when it failed, drops every result table, so no table presents a
verdict for a failed build. `lookahead report` then checks the stored identity against
the study and its files as they are now (:func:`check_current`) and refuses a stale one.

The same record lets `lookahead run` skip a build that would reproduce the database
(:func:`build_up_to_date`): `build_identity` also stores a fingerprint of every file the
build reads (:func:`inputs_fingerprint`) and of the code that builds it
(:func:`code_fingerprint`), and `build_log` says whether the last build was a complete
`dbt build` (no selection) that passed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import duckdb
import pandas as pd

from lookahead.config import PROJECT_ROOT, Study
from lookahead.errors import UserError

RAW_TASKS = ("forecast", "recall", "mink")
#: The result marts users query: each Python-computed one is a contracted SQL view over the
#: table its Python model `<name>_py` writes (macros/contracts.sql); a failed build drops
#: both (macros/build_log.sql), so neither can pass for its result.
RESULT_MARTS = ("verdict", "regression_results", "paper_tables", "bootstrap_results", "lap_robustness")
RESULT_TABLES = (*tuple(n for mart in RESULT_MARTS for n in (mart, mart + "_py")), "gx_validation_results")
#: The table that holds the verdict row (the view `verdict` reads it): where its
#: result_status mark is written.
VERDICT_TABLE = "verdict_py"
IDENTITY_COLUMNS = (
    "invocation_id",
    "study_name",
    "settings_hash",
    "data_fingerprint",
    "forecast_fingerprint",
    "recall_fingerprint",
    "mink_fingerprint",
)


class StaleResultError(UserError, RuntimeError):
    """The database holds no result for the study as it is now; the message says why."""


# The verdict row's own mark (column result_status), so that a SQL user reading `verdict`
# sees whether it may be quoted: written as UNFINISHED when the verdict model creates the
# row, set to COMPLETE by on-run-end when the build passed (macros/build_log.sql), and to
# "stale: <why>" when a later build starts or `lookahead` finds the study changed since
# (:func:`mark_stale`). A killed build leaves its verdict UNFINISHED.
UNFINISHED = "unfinished: the dbt build that wrote this verdict has not finished; do not quote it"
COMPLETE = (
    "complete: the dbt build passed; still current only while the study's settings, "
    "files and code are unchanged (lookahead report checks)"
)
STALE = "stale: "


def fingerprint(path: str | Path) -> str:
    """sha256 of a file's bytes ('missing' when there is none), read in 1 MiB blocks.
    Within one process a file is read once while its size and nanosecond mtime stay the
    same (build_identity fingerprints each raw file and then all of them together)."""
    p = Path(path)
    if not p.is_file():
        return "missing"
    st = p.stat()
    return _fingerprint(str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


FINGERPRINT_BLOCK = 1 << 25  # bytes read and hashed at a time (see _fingerprint)


@functools.lru_cache(maxsize=4096)
def _fingerprint(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """Read in 32 MiB blocks into one buffer. Reading and hashing a block run without the
    interpreter lock, but taking it back between blocks waits until the other dbt thread
    lets go of it, which a Python model busy in C code can hold for a long time: with
    1 MiB blocks, the 3.7 GB of a 1,000,000-row study took 147 s beside a thread hashing
    keys 100,000 per `map` (3 s alone); with 32 MiB blocks 9 s (lookahead.keys.sha256_hex
    now lets go every 16,384 keys as well)."""
    h = hashlib.sha256()
    buffer = bytearray(min(FINGERPRINT_BLOCK, max(size, 1)))  # no 32 MiB for a small file
    view = memoryview(buffer)
    with open(path, "rb") as fh:
        while n := fh.readinto(buffer):
            h.update(view[:n])
    return "sha256:" + h.hexdigest()


# Path settings the build reads (a file, or a folder whose every file is read). Every
# path setting is in exactly one of the two tuples (tests/python/test_build_skip.py).
BUILD_INPUT_SETTINGS = (
    "data_path",
    "raw_dir",
    "claims_raw_dir",
    "claims_predictions_path",
    "claims_instances_path",
    "claims_corpus_path",
    "claims_extractions_path",
)
# Path settings the build never reads: the model (only the jobs load it) and where the
# jobs and the report write.
NOT_BUILD_INPUT_SETTINGS = (
    "model_path",
    "claims_model_path",
    "reference_model_path",
    "tokenizer_path",
    "results_dir",
    "outputs_dir",
)
# What the build is made of, relative to the project root: dbt's project and profile,
# models, macros, seeds, analyses, data tests, GX suites and the package.
CODE_PATHS = (
    "dbt_project.yml",
    "profiles",
    "models",
    "python_models",
    "macros",
    "seeds",
    "analyses",
    "tests/dbt",
    "expectations",
    "lookahead",
)
# Installed libraries the build runs but does not import from the project's code (dbt
# runs the project; the rest are found from the imports, :func:`build_distributions`).
CODE_DISTRIBUTIONS = ("dbt-core", "dbt-duckdb")
# Where the build's Python starts: the dbt Python models and the plugin dbt loads. Every
# project module they import (at any depth, a lazy import inside a function included) is
# on the build's path, and so is every library those modules import.
BUILD_ENTRY_POINTS = ("python_models", "lookahead/dbt_plugin.py")


def _skipped(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix in (".pyc", ".lock")


def copy_code(dest: Path, root: Path = PROJECT_ROOT) -> Path:
    """A copy of the code a build is made of (CODE_PATHS, without what code_fingerprint
    skips) under ``dest``: somewhere to edit a model without touching the project."""
    import shutil

    for rel in CODE_PATHS:
        src = root / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=lambda folder, names: [n for n in names if _skipped(Path(folder) / n)])
        else:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest / rel)
    return dest


def _tree_files(path: Path) -> list[Path]:
    """A file, or every file under a folder (sorted), skipping caches and lock files."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(p for p in path.rglob("*") if p.is_file() and not _skipped(p))


def _hash_tree(h: hashlib._Hash, label: str, path: Path) -> None:
    files = _tree_files(path)
    if not files:
        h.update(f"{label}\0missing\n".encode())
    for f in files:
        rel = f.relative_to(path).as_posix() if f != path else ""
        h.update(f"{label}\0{rel}\0{fingerprint(f)}\n".encode())


def build_input_paths(study: Study) -> dict[str, str | None]:
    """The path settings the build reads (BUILD_INPUT_SETTINGS, in its order), each read
    from its section; the names label the fingerprint."""
    c = study.claims
    paths = {
        "data_path": study.input.data_path,
        "raw_dir": study.output.raw_dir,
        "claims_raw_dir": c.claims_raw_dir,
        "claims_predictions_path": c.claims_predictions_path,
        "claims_instances_path": c.claims_instances_path,
        "claims_corpus_path": c.claims_corpus_path,
        "claims_extractions_path": c.claims_extractions_path,
    }
    assert tuple(paths) == BUILD_INPUT_SETTINGS
    return paths


#: Build inputs checked by what the build read (lookahead.raw_reads, build_identity.raw_reads)
#: rather than by a whole-folder fingerprint: the shared, append-only raw answers, where a
#: sibling study's lines must not make this study's result stale.
READ_RECORDED_SETTINGS = ("raw_dir",)


def inputs_fingerprint(study: Study) -> str:
    """sha256 over every file the build reads (BUILD_INPUT_SETTINGS) except the raw
    answers (READ_RECORDED_SETTINGS, checked by :func:`raw_changes`): an edited input row,
    a claim file or a claim job's new line changes it."""
    h = hashlib.sha256()
    for name, value in build_input_paths(study).items():
        if name in READ_RECORDED_SETTINGS:
            continue
        if not value:
            h.update(f"{name}\0unset\n".encode())
            continue
        _hash_tree(h, name, study.resolve(value))
    return "sha256:" + h.hexdigest()


def _imports(path: Path, module: str) -> set[str]:
    """The absolute module names a Python file imports, every import statement counted
    (``from a import b`` gives ``a`` and ``a.b``; the caller keeps what exists)."""
    import ast

    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, base] if base else pkg)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _project_file(module: str, root: Path) -> Path | None:
    p = root.joinpath(*module.split("."))
    for candidate in (p.with_suffix(".py"), p / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def build_imports(root: Path = PROJECT_ROOT) -> set[str]:
    """Top-level names of the libraries the build's Python imports: from BUILD_ENTRY_POINTS
    through every project module they import, transitively, read from the source (AST,
    nothing imported), so a new dependency is covered without anyone listing it."""
    todo: list[tuple[Path, str]] = []
    for entry in BUILD_ENTRY_POINTS:
        for f in _tree_files(root / entry):
            if f.suffix == ".py":
                todo.append((f, ".".join(f.relative_to(root).with_suffix("").parts)))
    seen: set[Path] = set()
    libraries: set[str] = set()
    while todo:
        path, module = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path, module):
            top = name.split(".")[0]
            if (root / top).is_dir() or (root / f"{top}.py").is_file():
                found = _project_file(name, root)
                if found is not None:
                    todo.append((found, name.removesuffix(".__init__")))
            elif top and top != "__future__":
                libraries.add(top)
    return libraries


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=4)
def build_distributions(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """name -> version of the installed distributions on the build's path: those that
    provide a library the build imports (:func:`build_imports`), CODE_DISTRIBUTIONS, and
    everything each of them requires, transitively (wildboottest brings numba, pyfixest
    formulaic). A standard-library module maps to no distribution and is covered by the
    Python version. Reads the installed metadata once (a lookup per name searches
    sys.path again: 25 ms each)."""
    import sys

    from packaging.requirements import InvalidRequirement, Requirement

    installed: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():  # the first on sys.path wins, as for an import
        installed.setdefault(_normal(dist.metadata["Name"] or ""), dist)
    todo = list(CODE_DISTRIBUTIONS)
    provides: Mapping[str, list[str]] = {}
    for lib in sorted(build_imports(root) - set(sys.stdlib_module_names)):
        if _normal(lib) in installed:  # most libraries are imported by their distribution's name
            todo.append(lib)
            continue
        provides = provides or metadata.packages_distributions()  # yaml -> PyYAML (slower: once)
        todo += provides.get(lib, [])
    seen: dict[str, str] = {}
    while todo:
        key = _normal(todo.pop())
        if key in seen or key not in installed:
            continue
        dist = installed[key]
        seen[key] = dist.version
        for req_text in dist.requires or []:
            try:
                req = Requirement(req_text)
            except InvalidRequirement:
                continue
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return dict(sorted(seen.items()))


#: Where library_versions keeps its last answer (dbt's gitignored target folder).
LIBRARY_CACHE = Path("target") / "lookahead_library_versions.json"


#: The project's own metadata folders (its editable install's dist-info in site-packages,
#: the egg-info setuptools leaves in the checkout): not a library the build imports (its
#: code is hashed file by file), and on the path of some processes only: dbt adds the
#: checkout as profiles/.. (profiles/profiles.yml, module_paths), a `lookahead` command
#: run from elsewhere does not have it. With them in the key, dbt and the lookahead
#: command derived the versions again by turns, about 1.8 s each time.
OWN_DISTRIBUTION_PREFIXES = ("lookahead_bias-", "lookahead_bias.")


def _installed_key(root: Path) -> str:
    """What library_versions depends on, cheaply: the build's Python sources (their
    fingerprints) and the names of every installed distribution's metadata folder on
    sys.path (the names carry the versions: wildboottest-0.3.2.dist-info), each folder
    once whatever its spelling, the project's own left out (OWN_DISTRIBUTION_PREFIXES). A folder on
    the path that holds no metadata folder (the script's folder, the working folder, a
    test's helper folder) adds no distribution and is left out: with it in, dbt, the
    lookahead command and a Python session each had a key of their own and derived the
    versions again by turns, a second or more each time."""
    import sys

    h = hashlib.sha256(platform.python_version().encode())
    for entry in ("lookahead", "python_models"):
        for f in _tree_files(root / entry):
            if f.suffix == ".py":
                h.update(f"{f.relative_to(root).as_posix()}\0{fingerprint(f)}\n".encode())
    seen: set[str] = set()
    for folder in sys.path:
        real = os.path.realpath(folder or ".")
        if real in seen:  # the same folder again, under another spelling: first one wins
            continue
        seen.add(real)
        try:
            names = sorted(
                n
                for n in os.listdir(real)
                if n.endswith((".dist-info", ".egg-info")) and not n.startswith(OWN_DISTRIBUTION_PREFIXES)
            )
        except OSError:
            continue
        if names:
            h.update(f"{real}\0{','.join(names)}\n".encode())
    return h.hexdigest()


def library_versions(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """Python's version and the version of every distribution on the build's path
    (:func:`build_distributions`). Deriving the list reads the sources and the installed
    metadata (about 1-2 s), so the answer is kept in LIBRARY_CACHE under a key that any
    change of source or installed version changes (:func:`_installed_key`)."""
    key = _installed_key(root)
    cache = root / LIBRARY_CACHE
    try:
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            return dict(stored["versions"])
    except (OSError, ValueError, AttributeError, KeyError):
        pass
    versions = {"python": platform.python_version(), **build_distributions(root)}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "versions": versions}), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:  # a read-only checkout: derive it again next time
        pass
    return versions


def code_fingerprint(root: Path = PROJECT_ROOT) -> str:
    """sha256 over the code that builds a study (CODE_PATHS, file by file) and the Python
    and library versions (:func:`library_versions`, derived from the imports): a changed model, macro, data test, GX suite,
    seed or package module changes it."""
    h = hashlib.sha256()
    for rel in CODE_PATHS:
        _hash_tree(h, rel, root / rel)
    h.update(json.dumps(library_versions(root), sort_keys=True).encode())
    return "sha256:" + h.hexdigest()


def cache_fingerprint(raw_dir: str | Path, task: str) -> str:
    """Fingerprint of a task's whole cache, every shard (lookahead.cache.files.shard_files).

    A cache that is just the single-process file keeps that file's own fingerprint, so
    databases built before sharding stay current; with shards it is the sha256 of each
    shard's path (relative to raw_dir) and fingerprint, in path order."""
    from lookahead.cache.files import shard_files

    root = Path(raw_dir)
    files = shard_files(root, task)
    if not files:
        return "missing"
    if files == [root / f"{task}.jsonl"]:
        return fingerprint(files[0])
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(root).as_posix()}\0{fingerprint(f)}\n".encode())
    return "shards:" + h.hexdigest()


def current_identity(study: Study) -> dict[str, str]:
    """The identity columns a build of this study would record now that must equal the
    stored ones (the task caches' fingerprints are kept for the record only: whether the
    answers a build read changed is :func:`raw_changes`' question)."""
    return {
        "study_name": study.name,
        "settings_hash": study.settings_hash,
        "data_fingerprint": fingerprint(study.data_file),
    }


def raw_changes(con: duckdb.DuckDBPyConnection, study: Study, recorded_json: str | None, tables: set[str]) -> list[str]:
    """Why the raw answers a build read (build_identity.raw_reads) may have changed for
    this study (lookahead.raw_reads.changes), asking the database's int_expected_keys
    which new keys the study reads; [] when none did."""
    from lookahead import raw_reads

    recorded = raw_reads.from_json(recorded_json)
    if recorded is None:
        return ["the build recorded no raw reads (a build of an earlier version)"]

    def reads_keys(keys: set[str]) -> set[str]:
        if "int_expected_keys" not in tables:  # cannot tell: every new key counts
            return keys
        rows = con.execute(
            "select distinct key from int_expected_keys where key in (select unnest(?))", [sorted(keys)]
        ).fetchall()
        return {r[0] for r in rows}

    return raw_reads.changes(study.raw_dir, recorded, reads_keys)


def with_identity(frame: pd.DataFrame, identity: pd.DataFrame) -> pd.DataFrame:
    """A result frame with the build's identity columns (from `build_identity`) added."""
    out = frame.copy()
    row = identity.iloc[0]
    for col in IDENTITY_COLUMNS:
        out[col] = str(row[col])
    out["result_status"] = UNFINISHED  # on-run-end marks it complete once the build passed
    return out


@dataclass(frozen=True)
class BuildCheck:
    invocation_id: str
    verdict: str


WHAT = {
    "study_name": "the study name",
    "settings_hash": "the study settings",
    "data_fingerprint": "the input file",
    "inputs_fingerprint": "an input file (data, claim files)",
    "code_fingerprint": "the code (models, macros, seeds, tests, suites, package or libraries)",
}


def _last_build(con: duckdb.DuckDBPyConnection, tables: set[str]) -> tuple | None:
    """(invocation_id, status, failed_nodes, message) of the last build_log row: the
    end-of-build row, or the 'started' row of a build that never reached its end."""
    if "build_log" not in tables:
        return None
    return con.sql(
        "select invocation_id, status, failed_nodes, message from build_log order by finished_at desc, status = 'started' limit 1"
    ).fetchone()


def _not_passed(study: Study, last: tuple) -> str:
    if last[1] == "started":
        return (
            f"the last dbt build of study '{study.name}' (invocation {last[0]}) did not finish "
            "(killed or interrupted); rerun dbt build"
        )
    return (
        f"the last dbt build of study '{study.name}' (invocation {last[0]}) failed at "
        f"{last[2]}: {_without_traceback(str(last[3] or ''))}; fix that and rerun dbt build"
    )


_EXCEPTION = re.compile(r"([A-Za-z_]\w*(?:Error|Failed|Exception)): ")


def _without_traceback(message: str) -> str:
    """dbt's failure message (one line in build_log) without a Python model's traceback:
    from the last exception's name on, which names what failed (as lookahead.cli does
    with dbt's output)."""
    head, marker, tail = message.partition("Traceback (most recent call last)")
    if not marker:
        return message
    found = list(_EXCEPTION.finditer(tail))
    return tail[found[-1].start() :].strip() if found else head.strip()


def _identity_row(con: duckdb.DuckDBPyConnection, invocation_id: str) -> tuple | None:
    """(inputs_fingerprint, code_fingerprint, raw_reads) of build_identity's row for the
    invocation (raw_reads None in a database built before it was recorded)."""
    cols = {r[0] for r in con.sql("describe build_identity").fetchall()}
    if not {"inputs_fingerprint", "code_fingerprint"} <= cols:
        return None
    raw_col = "raw_reads" if "raw_reads" in cols else "null"
    return con.execute(
        f"select inputs_fingerprint, code_fingerprint, {raw_col} from build_identity where invocation_id = ?", [invocation_id]
    ).fetchone()


def check_current(con: duckdb.DuckDBPyConnection, study: Study) -> BuildCheck:
    """The verdict's build if it is this study's current result, else StaleResultError."""
    tables = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
    last = _last_build(con, tables)
    if last is not None and last[1] != "success":
        raise StaleResultError(_not_passed(study, last))
    if "verdict" not in tables:
        raise StaleResultError(f"study '{study.name}' has no verdict in its database: run dbt build")
    cols = {r[0] for r in con.sql("describe verdict").fetchall()}
    if not set(IDENTITY_COLUMNS) <= cols:
        raise StaleResultError("the verdict table records no build identity (an older build): rerun dbt build")
    stored = con.sql(f"select {', '.join(IDENTITY_COLUMNS)}, verdict from verdict").df().iloc[0]
    now = current_identity(study)
    changed = [WHAT[k] for k, v in now.items() if str(stored[k]) != v]
    if changed and "build_identity" in tables:  # every change named at once
        read = _identity_row(con, str(stored["invocation_id"]))
        changed += raw_changes(con, study, read[2], tables) if read else []
    if changed:
        raise StaleResultError(
            f"the verdict in the database was built from other inputs: {', '.join(changed)} "
            f"changed since dbt build (invocation {stored['invocation_id']}); rerun dbt build"
        )
    if last is None:
        raise StaleResultError(f"no finished dbt build of study '{study.name}' is recorded (build_log): rerun dbt build")
    if last[0] != stored["invocation_id"]:
        raise StaleResultError(
            f"the verdict comes from dbt invocation {stored['invocation_id']}, not from the last "
            f"build ({last[0]}): rerun dbt build"
        )
    # the files and code the build read, as `lookahead run` checks them before skipping a build
    if "build_identity" in tables:
        ident_cols = {r[0] for r in con.sql("describe build_identity").fetchall()}
        if {"invocation_id", "inputs_fingerprint", "code_fingerprint"} <= ident_cols:
            row = _identity_row(con, str(stored["invocation_id"]))
            if row is None:
                raise StaleResultError("the build identity is not the verdict's build: rerun dbt build")
            now_more = {"inputs_fingerprint": inputs_fingerprint(study), "code_fingerprint": code_fingerprint()}
            changed = [WHAT[k] for k, v in zip(now_more, row[:2], strict=False) if str(v) != now_more[k]]
            changed += raw_changes(con, study, row[2], tables)
            if changed:
                raise StaleResultError(
                    f"the verdict in the database was built from other inputs: {', '.join(changed)} "
                    f"changed since dbt build (invocation {stored['invocation_id']}); rerun dbt build"
                )
    return BuildCheck(str(stored["invocation_id"]), str(stored["verdict"]))


_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")


def lock_message(database: Path | str, error: BaseException | str) -> str | None:
    """The one line for a database another process holds, from DuckDB's lock error (None
    when ``error`` is not one): the file, the holder's program and PID when DuckDB reports
    them, and the fix."""
    text = str(error)
    if "Could not set lock" not in text and "Conflicting lock" not in text:
        return None
    m = _LOCK_HOLDER.search(text)
    who = f" (PID {m['pid']}, {Path(m['program']).name})" if m else ""
    return (
        f"cannot check: {database} is held by another process{who}; close that process "
        "(a duckdb shell or notebook), or open the database there with -readonly / "
        "read_only=True, then rerun"
    )


def held_by(database: Path | str, write: bool = False) -> str | None:
    """:func:`lock_message` when another process holds ``database`` so that this one
    cannot open it (read-only, or for writing with ``write``), else None. A missing file
    is not held (and is not created)."""
    if not Path(database).is_file():
        return None
    try:
        duckdb.connect(str(database), read_only=not write).close()
    except duckdb.Error as err:
        return lock_message(database, err)
    return None


def mark_stale(database: Path, why: str, mark: str | None = None) -> bool:
    """Mark the database's verdict row stale (column result_status; ``mark`` replaces the
    whole text), for SQL users, who read the table without `lookahead`'s check; False
    when the database cannot be opened for writing now (another process holds it) or has
    no verdict."""
    if not Path(database).is_file():
        return False
    try:
        con = duckdb.connect(str(database))
    except duckdb.Error:
        return False
    try:
        kinds = dict(con.sql("select table_name, table_type from information_schema.tables").fetchall())
        # the Python model's table, or the verdict table of a database built before the view
        table = VERDICT_TABLE if VERDICT_TABLE in kinds else "verdict"
        if kinds.get(table) != "BASE TABLE":
            return False
        con.execute(f"alter table {table} add column if not exists result_status varchar")
        con.execute(f"update {table} set result_status = ?", [mark or STALE + why])
        con.execute("checkpoint")
        return True
    except duckdb.Error:
        return False
    finally:
        con.close()


def sync_status(database: Path, stale: StaleResultError | str | None, status: str | None = None) -> bool:
    """Write what :func:`check_current` just answered into the verdict row's result_status,
    so that a SQL reader of `verdict` and `lookahead report`/`compare` read one answer:
    "stale: <why>" when ``stale`` is given, else COMPLETE (written only when ``status``,
    the row's text as read, differs). The one place report and compare record a check."""
    if stale is not None:
        return mark_stale(database, str(stale))
    if status == COMPLETE:
        return False
    return mark_stale(database, "", mark=COMPLETE)


#: What every build `lookahead run` and `lookahead build` make leaves out: dbt's unit tests
#: (the models' `unit_tests:`), which test a model's SQL on rows written in its YAML, the
#: same whatever the study. dbt's documentation advises running them in development and
#: CI rather than in each production build; `make test` and any plain `dbt build` run
#: them. They build no table, so a build with them and one without are the same build
#: for :func:`build_up_to_date` (:func:`nodes_selected`).
UNIT_TESTS_LEFT_OUT = ("--exclude-resource-type", "unit_test")


def nodes_selected(selection: str) -> str:
    """A build's selection as build_log records it (macros/build_log.sql: each flag, then
    its values), without the exclusion of unit tests: what says which tables and data
    tests the build made."""
    flag, unit = UNIT_TESTS_LEFT_OUT
    groups: list[list[str]] = []
    for token in selection.split():
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    kept = [g if g[0] != flag else [flag, *(v for v in g[1:] if v != unit)] for g in groups]
    return " ".join(" ".join(g) for g in kept if len(g) > 1 or g[0] != flag)


def build_up_to_date(study: Study, selection: str = "", root: Path = PROJECT_ROOT) -> tuple[str | None, str]:
    """(the last build's invocation id, '') when a `dbt build` now would rebuild the same
    results: the last build was a complete `dbt build` (no selection, or ``selection``, the
    one `lookahead run` builds the study with) that passed, its verdict is this
    study's current result (:func:`check_current`: same settings hash, input file and raw
    answers), and every file the build reads and the code (under `root`) are unchanged
    since. Else (None, why it must build). Operational settings (batch size, where the
    report goes) are outside the settings hash: changing one does not rebuild."""
    db = study.database
    if not Path(db).is_file():
        return None, "no database yet"
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as err:
        return None, lock_message(db, err) or f"the database cannot be read ({str(err).splitlines()[0]})"
    try:
        tables = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
        if "build_log" not in tables:
            return None, "no build recorded"
        log_cols = {r[0] for r in con.sql("describe build_log").fetchall()}
        if not {"command", "selection"} <= log_cols:
            return None, "the build log predates build skipping"
        last = con.sql(
            "select invocation_id, status, command, selection from build_log "
            "order by finished_at desc, status = 'started' limit 1"
        ).fetchone()
        if last is None or last[1] != "success":
            return None, (
                "no build recorded"
                if last is None
                else "the last build did not finish"
                if last[1] == "started"
                else "the last build failed"
            )
        if last[2] != "build" or nodes_selected(last[3] or "") not in ("", nodes_selected(selection)):
            return None, f"the last build was `dbt {last[2]}` {last[3] or ''}".rstrip() + ", not a full dbt build"
        if "build_identity" not in tables:
            return None, "the last build recorded no build identity"
        try:
            check_current(con, study)
        except StaleResultError as err:
            return None, str(err)
        ident_cols = {r[0] for r in con.sql("describe build_identity").fetchall()}
        if not {"inputs_fingerprint", "code_fingerprint"} <= ident_cols:
            return None, "the build identity predates build skipping"
        recorded = con.sql("select invocation_id, inputs_fingerprint, code_fingerprint from build_identity").fetchone()
    finally:
        con.close()
    if recorded is None:
        return None, "the last build recorded no build identity"
    inv, inputs, code = recorded
    if inv != last[0]:
        return None, "the build identity is not the last build's"
    if inputs != inputs_fingerprint(study):
        return None, "an input file changed (data, claim files)"
    if code != code_fingerprint(root):
        return None, "the code changed (models, macros, seeds, tests, suites, package or libraries)"
    return str(inv), ""
