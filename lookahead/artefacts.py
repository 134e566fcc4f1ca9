"""The report's files as one unit: written together, swapped in whole, retired whole.

A report is many files: REPORT.md, its CSVs, `tables/*.tex`, `figures/*.png`, the Stata
do-file in the results folder, and the `.dta` panels in the outputs folder. Retired or
replaced one by one, a refusal or a kill could leave a new `verdict.csv` beside an old
REPORT.md, or old figures beside a report that says they are gone. So:

- :func:`write_artefact_set` has the report write into a staging folder (inside each
  destination folder, so every move is a rename on one file system); then one
  journalled swap retires the old set and moves the new one in.
- The set is what a **manifest** (``.lookahead-manifest.json`` in the results folder)
  says the tool wrote, nothing else: a user's own file in the results or outputs folder
  is never moved, whatever its name.
- Nothing is ever deleted: a retired set goes to ``<folder>/stale/`` with ``WHY.txt``, and
  an older ``stale/`` is first renamed ``stale.1``, ``stale.2``, ... (the next free number).
- The swap is journalled (``.lookahead-swap.json``): its moves are written down before the
  first one, REPORT.md leaves first and comes back last, and every later command that
  touches the folder (:func:`recover`, called by the retire and the write) completes an
  interrupted swap before anything else. A kill therefore leaves the old set, the new
  set, or a set without REPORT.md and index.html that the next command completes; never
  an old REPORT.md beside new CSVs.
- Older retired sets are kept as ``stale.1`` (oldest), ``stale.2``, ...; beyond the
  study's ``stale_reports_kept`` (default 3) the oldest are deleted, but only folders
  that hold the tool's ``WHY.txt`` (a user's own ``stale.N`` stays).

The journal and the manifest are files in a folder anyone may have written (a pull
request, a shared study bundle), so they are read as data, never as orders:

- They hold paths relative to the study's folders only (``results`` or ``outputs`` and
  a path inside, with no ``..``); the folders are always the ones the study names now,
  never a folder read from the file; a staging folder is ``<folder>/.lookahead-new-<id>``
  for the journal's hexadecimal id.
- Each is signed (HMAC-SHA256) with a key kept outside every results folder, in the
  user's state folder (:func:`state_dir`: ``$LOOKAHEAD_STATE_DIR``, else
  ``$XDG_STATE_HOME/lookahead``, else ``~/.local/state/lookahead``), over its content
  and the results folder it was written for. A journal or manifest whose signature does
  not hold (planted, edited, copied from another folder or another user, or written by
  a version of the tool before signing) or that names any other path is refused in one
  line (:class:`UntrustedRecordError`) and left where it is; nothing is moved.
- Nothing is removed recursively on a path read from a file: only staging folders the
  tool names from the id, and ``stale.N`` folders found by listing the folder.
- No move follows a symbolic link out of the folder: a symlinked ``tables/``,
  ``figures/`` or ``stale/`` is refused in one line before the first move, unless the
  study sets ``follow_symlinks: true``.

A results or outputs folder that is the data folder, the raw folder or the project root
(or holds the project) is refused in one line (:func:`check_output_folders`), before
anything is written; so is one of the study's folders that is a symbolic link leading
out of the project, or out of the folder named (:func:`check_symlinked_folders`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from lookahead.errors import UserError
from lookahead.settings_sections import OutputSettings

if TYPE_CHECKING:
    from lookahead.config import Study

MANIFEST = ".lookahead-manifest.json"
JOURNAL = ".lookahead-swap.json"
LOCK = ".lookahead-artefacts.lock"
STAGING_PREFIX = ".lookahead-new-"
STALE_FOLDER = "stale"
WHY_FILE = "WHY.txt"
#: The files that present a result (the report and its page): they leave a folder first
#: and enter it last, so neither is ever shown beside files of another set.
PRESENTING = ("REPORT.md", "index.html")
ROOTS = ("results", "outputs")
#: Where the signing key lives (see the module docstring); the variable is for a user
#: who keeps state elsewhere, and for tests.
STATE_DIR_ENV = "LOOKAHEAD_STATE_DIR"
SIGNING_KEY_FILE = "artefacts.key"
#: The format of the signed files: an unsigned file of an older version is refused.
RECORD_VERSION = 2
_SWAP_ID = re.compile(r"[0-9a-f]{32}")
_STALE_N = re.compile(rf"{STALE_FOLDER}\.([0-9]+)")
#: The output section's declared defaults: the folders of a report made outside a study.
DEFAULT_OUTPUT = OutputSettings.with_defaults()


class OutputFolderError(UserError, ValueError):
    """A results or outputs folder the tool may not write its report into; one line."""


class UntrustedRecordError(OutputFolderError):
    """A swap journal or manifest the tool did not write for this folder, or one naming a
    path outside the study's folders: refused in one line, left in place."""


@dataclass(frozen=True)
class Folders:
    """Where a study's report goes: the results folder (REPORT.md, CSVs, tables/,
    figures/, do-file) and the outputs folder (.dta panels), resolved; and the study's
    output section, which says how many older retired sets each keeps
    (``stale_reports_kept``) and whether a symlinked folder inside may be followed
    (``follow_symlinks``); its declared defaults outside a study (`lookahead compare`)."""

    results: Path
    outputs: Path
    output: OutputSettings = DEFAULT_OUTPUT

    @classmethod
    def of(cls, study: Study) -> Folders:
        return cls(Path(study.results_dir).resolve(), Path(study.outputs_dir).resolve(), study.output)

    def root(self, name: str) -> Path:
        return self.results if name == "results" else self.outputs


def _holds_project(path: Path, root: Path) -> bool:
    return path == Path(path.anchor) or path in root.parents


def check_symlinked_folders(study: Study) -> None:
    """Refuse (OutputFolderError, one line naming the setting) a results_dir, outputs_dir,
    raw_dir or claims_raw_dir that is reached through a symbolic link leading out of the
    project (for a folder named inside it) or out of the folder named (a folder named
    outside it that is itself a link), unless the study sets ``follow_symlinks: true``;
    and, whatever that setting, a raw folder that is the file system's root or a folder
    holding the project; and a link inside a raw folder (a cache file, a shard) that leads
    out of it. Why: the jobs lock, write and walk the raw folder and the report moves
    files in and out of its folders, so a link planted in the project (by a pull request,
    a shared bundle) would have them write, move or scan anywhere."""
    root = Path(os.path.abspath(study.root))
    real_root = root.resolve()
    follow = study.output.follow_symlinks
    settings = (
        ("results_dir", study.results_dir),
        ("outputs_dir", study.outputs_dir),
        ("raw_dir", study.output.raw_dir and study.resolve(study.output.raw_dir)),
        ("claims_raw_dir", study.claims.claims_raw_dir and study.resolve(study.claims.claims_raw_dir)),
    )
    for setting, value in settings:
        if not value:
            continue
        named = Path(os.path.abspath(value))
        real = named.resolve()
        if setting.endswith("raw_dir") and _holds_project(real, real_root):
            raise OutputFolderError(
                f"setting '{setting}': {named} is {'the file system root' if real == Path(real.anchor) else real}, "
                "a folder that holds the project; the jobs write and scan this folder, so point "
                f"{setting} at a folder of its own (e.g. raw/<study_name>)"
            )
        if follow or real == named:
            continue
        if named.is_relative_to(root):
            out = not real.is_relative_to(real_root)
            where = "out of the project"
        else:  # named outside the project: the folder itself must not be a link
            out = named.parent.resolve() / named.name != real
            where = "out of the folder named"
        if out:
            raise OutputFolderError(
                f"setting '{setting}': {named} is a symbolic link to {real}, {where}; point {setting} at "
                "the real folder, or set follow_symlinks: true to allow it"
            )
    for setting, value in settings[2:]:
        linked = None if follow or not value else _link_out_of(Path(value).resolve())
        if linked is not None:
            raise OutputFolderError(
                f"setting '{setting}': {linked} is a symbolic link to {linked.resolve()}, out of the raw folder; "
                "the jobs append to and lock the files there, so replace the link with the file, or set "
                "follow_symlinks: true to allow it"
            )


def _link_out_of(folder: Path) -> Path | None:
    """The first entry of a raw folder (its files, and its shards/ folders and their
    files) that is a symbolic link leading out of it, or None: the jobs open these files
    to append and lock, which a link would redirect to any file."""
    from lookahead.cache.files import SHARDS_DIR

    if not folder.is_dir():
        return None
    entries = list(folder.iterdir())
    shards = folder / SHARDS_DIR
    if shards.is_dir() and not shards.is_symlink():
        for shard in shards.iterdir():
            entries.append(shard)
            if shard.is_dir() and not shard.is_symlink():
                entries += list(shard.iterdir())
    for p in sorted(entries):
        if p.is_symlink() and not p.resolve().is_relative_to(folder):
            return p
    return None


def check_output_folders(study: Study) -> None:
    """Refuse (OutputFolderError, one line naming the setting) a results_dir or
    outputs_dir that is the data folder, a raw folder, or the project root or a folder
    above it: the report moves files in and out of those folders, which must hold nothing
    else the study needs. Why equality and not "inside": a results folder inside the
    project (the default) is fine, and the retire step only moves what the manifest
    lists. Then the folders' symbolic links (:func:`check_symlinked_folders`) and the
    results folder's journal and manifest (:func:`check_records`)."""
    root = Path(study.root).resolve()
    forbidden = {root: "the project root"}
    if study.input.data_path:
        forbidden.setdefault(study.resolve(study.input.data_path).resolve().parent, "the data folder (data_path)")
    for setting, value in (("raw_dir", study.output.raw_dir), ("claims_raw_dir", study.claims.claims_raw_dir)):
        if value:
            forbidden.setdefault(study.resolve(value).resolve(), f"the raw folder ({setting})")
    for setting, folder in (("results_dir", study.results_dir), ("outputs_dir", study.outputs_dir)):
        here = Path(folder).resolve()
        what = forbidden.get(here) or ("a folder that holds the project" if here in root.parents else None)
        if what:
            raise OutputFolderError(
                f"setting '{setting}': {here} is {what}; the report moves its own files in and out "
                f"of this folder, so point {setting} at a folder of its own (e.g. results/{study.name})"
            )
    check_symlinked_folders(study)
    check_records(Folders.of(study))


# --- the signed records (journal and manifest) -----------------------------------------


def state_dir() -> Path:
    """The user's state folder for the tool: outside every project and results folder."""
    given = os.environ.get(STATE_DIR_ENV)
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "lookahead"


def _signing_key() -> bytes:
    """The signing key (32 random bytes, readable by the user only), made on first use;
    OutputFolderError (one line) when the state folder cannot hold it."""
    try:
        return _read_or_make_signing_key(state_dir())
    except OSError as err:
        raise OutputFolderError(
            f"cannot keep the key that signs report manifests in {state_dir()} "
            f"({err.strerror or type(err).__name__}); set {STATE_DIR_ENV} to a folder "
            "of yours outside the results folders"
        ) from None


def _read_or_make_signing_key(folder: Path) -> bytes:
    """The key in ``folder``, made there (mode 0600) when it is not yet."""
    path = folder / SIGNING_KEY_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    # written whole under a name of its own, then linked into place: a process that reads
    # the key never sees it half written, and of two that make it at once one key wins
    tmp = folder / f".{SIGNING_KEY_FILE}.{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(32))
    try:
        os.link(tmp, path)
    except FileExistsError:  # another process made it meanwhile: theirs is the key
        pass
    finally:
        tmp.unlink()
    return path.read_bytes()


def _mac(kind: str, folder: Path, body: dict) -> str:
    message = json.dumps({"kind": kind, "folder": str(folder), "body": body}, sort_keys=True, separators=(",", ":")).encode(
        "utf-8"
    )
    return hmac.new(_signing_key(), message, hashlib.sha256).hexdigest()


def _write_new(path: Path, text: str) -> None:
    """Write a file the tool names, never through a link planted at that name."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _write_signed(path: Path, kind: str, folders: Folders, body: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    _write_new(tmp, json.dumps({"version": RECORD_VERSION, **body, "mac": _mac(kind, folders.results, body)}, indent=1))
    os.replace(tmp, path)


def _entries(value: object, path: Path) -> list[tuple[str, str]]:
    """(root, relative path) pairs of a record, each a path inside one of the study's
    folders; anything else is refused."""
    if not isinstance(value, list):
        raise UntrustedRecordError(f"{path}: its file list is not a list; nothing was moved")
    out = []
    for e in value:
        r, rel = (
            (e.get("root"), e.get("path"))
            if isinstance(e, dict)
            else (tuple(e) if isinstance(e, list) and len(e) == 2 else (None, None))
        )
        parts = PurePosixPath(rel).parts if isinstance(rel, str) else ()
        if (
            r not in ROOTS
            or not parts
            or PurePosixPath(rel).is_absolute()
            or "\\" in rel
            or "\x00" in rel
            or any(p in ("..", ".") for p in parts)
        ):
            raise UntrustedRecordError(
                f"{path} names {str(rel)[:120]!r}, not a file inside the study's results or outputs folder; "
                "refused and left in place, nothing was moved: inspect and remove it, then run again"
            )
        out.append((str(r), str(rel)))
    return out


def _read_signed(path: Path, kind: str, folders: Folders) -> dict:
    """A journal or manifest, verified: signed by this user's key for this results folder,
    and naming only paths inside the study's folders. UntrustedRecordError otherwise."""
    what = "swap journal" if kind == "journal" else "manifest"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        mac = data.pop("mac", None) if isinstance(data, dict) else None
        version = data.pop("version", None) if isinstance(data, dict) else None
    except (ValueError, OSError):
        data, mac, version = None, None, None
    if not isinstance(mac, str) or version != RECORD_VERSION or not hmac.compare_digest(mac, _mac(kind, folders.results, data)):
        raise UntrustedRecordError(
            f"{path}: a {what} this tool did not write for this folder (no valid signature from "
            f"{state_dir() / SIGNING_KEY_FILE}); refused and left in place, nothing was moved: inspect and remove it "
            "(one an earlier version of lookahead wrote can go: the tool's files are then found by their exact "
            "names), then run again"
        )
    if kind == "journal" and not (isinstance(data.get("id"), str) and _SWAP_ID.fullmatch(data["id"])):
        raise UntrustedRecordError(f"{path}: its swap id is not one the tool makes; refused and left in place")
    for field in ("retire", "install") if kind == "journal" else ("files",):
        _entries(data.get(field), path)
    return data


def check_records(folders: Folders) -> None:
    """Refuse (UntrustedRecordError, one line) a journal or manifest in the results folder
    that the tool did not write for it: run before anything is moved or written."""
    for name, kind in ((JOURNAL, "journal"), (MANIFEST, "manifest")):
        path = folders.results / name
        if path.is_symlink() or path.exists():
            if path.is_symlink() or not path.is_file():
                raise UntrustedRecordError(f"{path}: not a plain file the tool wrote; refused and left in place")
            _read_signed(path, kind, folders)


# --- the manifest ----------------------------------------------------------------------


def _legacy_entries(folders: Folders) -> list[tuple[str, str]]:
    """What a results folder written before manifests holds of the tool's, by the exact
    names the report writes (never a pattern such as *.csv that a user's file matches)."""
    from lookahead.report_names import PAPER_TABLES, REGRESSIONS, TABLE5_READING, TABLES

    names = [
        *PRESENTING,
        "reghdfe.do",
        f"{TABLE5_READING}.csv",
        *(f"{t}.csv" for t in TABLES),
        *(f"regression_{spec}_{sample}.csv" for spec, sample in REGRESSIONS),
    ]
    names += [f"tables/{t}.tex" for t in ("table1_pre", "table1_post", *PAPER_TABLES)]
    names += [f"figures/{n}.png" for n in ("lap_hist", "accuracy_by_lap_decile", "bootstrap", "claims_shapley")]
    found = [("results", n) for n in names if _plain_file(folders, "results", n)]
    found += [("outputs", n) for n in ("panel_pre.dta", "panel_post.dta") if _plain_file(folders, "outputs", n)]
    return found


def _plain_file(folders: Folders, root: str, rel: str) -> bool:
    """A file at root/rel reached without a symlinked folder on the way (unless allowed)."""
    p = folders.root(root) / rel
    return p.is_file() and (folders.output.follow_symlinks or _linked_folder(folders.root(root), p) is None)


def read_manifest(folders: Folders) -> list[tuple[str, str, Path]]:
    """(root name, relative path, absolute path) of each file the tool's last report
    wrote that is still there, under the study's folders as they are named now (a
    manifest names no folder). Without a manifest, the exact names the report writes."""
    path = folders.results / MANIFEST
    if not (path.is_file() or path.is_symlink()):
        return [(r, rel, folders.root(r) / rel) for r, rel in _legacy_entries(folders)]
    data = _read_signed(path, "manifest", folders)
    return [(r, rel, folders.root(r) / rel) for r, rel in _entries(data["files"], path) if _plain_file(folders, r, rel)]


# --- the journalled swap ---------------------------------------------------------------


@contextlib.contextmanager
def _locked(folders: Folders) -> Iterator[None]:
    """One swap at a time per results folder (two reports of one study at once)."""
    folders.results.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(folders.results / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:  # a link planted at the lock's name (ELOOP), or no permission
        raise OutputFolderError(
            f"{folders.results / LOCK}: cannot use it as the report's lock "
            f"({err.strerror}); is it a link? remove it, then run again"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _presenting_last(entries: list[list[str]]) -> list[list[str]]:
    """Entries in move order for the new set: REPORT.md last."""
    return sorted(entries, key=lambda e: (e[1] in PRESENTING, e[1]))


def _linked_folder(root: Path, path: Path) -> Path | None:
    """The first folder between ``root`` and ``path`` (both included for the folders in
    between, the file itself excluded) that is a symbolic link, or None."""
    here = root
    for part in path.relative_to(root).parts[:-1]:
        here = here / part
        if here.is_symlink():
            return here
    return None


def _numbered_stale(base: Path) -> list[tuple[int, Path]]:
    """The ``stale.N`` folders of ``base`` (real folders, not links), oldest (lowest N) first."""
    found = []
    if base.is_dir():
        for p in base.iterdir():
            m = _STALE_N.fullmatch(p.name)
            if m and p.is_dir() and not p.is_symlink():
                found.append((int(m.group(1)), p))
    return sorted(found)


def prune_stale(base: Path, keep: int) -> list[Path]:
    """Delete the oldest ``stale.N`` folders of ``base`` beyond ``keep`` (the study's
    ``stale_reports_kept``), then number the rest 1, 2, ... oldest first; return what was
    deleted. Only a folder holding the tool's WHY.txt is deleted: a user's own
    ``stale.N`` is kept (and counted). The folders are found by listing ``base``, never
    read from a file, and a link is neither followed nor deleted."""
    numbered = _numbered_stale(base)
    deleted: list[Path] = []
    for _, p in numbered:
        if len(numbered) - len(deleted) <= keep:
            break
        why = p / WHY_FILE
        if why.is_file() and not why.is_symlink():
            shutil.rmtree(p)
            deleted.append(p)
    for i, (_, p) in enumerate((e for e in numbered if e[1] not in deleted), start=1):
        target = base / f"{STALE_FOLDER}.{i}"
        if p != target and not target.exists():
            os.replace(p, target)
    return deleted


def _stale_folder(base: Path, swap_id: str, keep: int) -> Path:
    """``base/stale`` for this swap: an older stale/ (another swap's) is first renamed to
    ``stale.N`` after the highest N there (so N orders them, oldest first), then the
    oldest beyond ``keep`` are pruned (:func:`prune_stale`)."""
    stale = base / STALE_FOLDER
    why = stale / WHY_FILE
    if stale.exists() and not (why.is_file() and swap_id in why.read_text(encoding="utf-8", errors="replace")):
        numbered = _numbered_stale(base)
        n = numbered[-1][0] + 1 if numbered else 1
        while (base / f"{STALE_FOLDER}.{n}").exists():
            n += 1
        os.replace(stale, base / f"{STALE_FOLDER}.{n}")
        prune_stale(base, keep)
    return stale


def _staging(folders: Folders, swap_id: str) -> dict[str, Path]:
    """The staging folders of a swap: named by the tool from the id, in the study's folders."""
    return {r: folders.root(r) / f"{STAGING_PREFIX}{swap_id}" for r in ROOTS}


def _moves(folders: Folders, journal: dict) -> Iterable[tuple[Path, Path, Path, Path]]:
    """(source root, source, destination root, destination) of every move a swap may make."""
    staging = _staging(folders, journal["id"])
    for r, rel in journal["retire"]:
        base = folders.root(r)
        yield base, base / rel, base, base / STALE_FOLDER / rel
    for r, rel in journal["install"]:
        yield staging[r], staging[r] / rel, folders.root(r), folders.root(r) / rel


def _check_moves(folders: Folders, journal: dict, where: Path) -> None:
    """Refuse, before the first move, a swap that would pass through a symlinked folder
    (tables/ -> elsewhere): the move would take a file out of the study's folders."""
    if folders.output.follow_symlinks:
        return
    for src_root, src, dest_root, dest in _moves(folders, journal):
        for root, path in ((src_root, src), (dest_root, dest)):
            linked = _linked_folder(root, path)
            if linked is not None:
                raise OutputFolderError(
                    f"{linked} is a symbolic link (to {linked.resolve()}); the report does not move files through "
                    f"it, nothing was moved ({where.name} kept): replace it with a real folder, or set "
                    "follow_symlinks: true to allow it"
                )


def _roll_forward(folders: Folders, journal: dict) -> None:
    """Carry out a swap's moves, re-rooted at the study's folders; every step checks what
    is already done, so running it again after a kill completes the swap (idempotent)."""
    swap_id = journal["id"]
    staging = _staging(folders, swap_id)
    install = [(str(r), str(rel)) for r, rel in journal["install"]]
    new = set(install)
    # 1. retire the old set, REPORT.md first
    for r, rel in sorted(journal["retire"], key=lambda e: (e[1] not in PRESENTING, e[1])):
        base = folders.root(r)
        src = base / rel
        if not src.is_file():
            continue
        if (r, rel) in new and not (staging[r] / rel).is_file():
            continue  # already replaced by the new file
        stale = _stale_folder(base, swap_id, folders.output.stale_reports_kept)
        dest = stale / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        why = stale / WHY_FILE
        if not why.is_file():
            _write_new(
                why,
                f"These files were moved here because they no longer show the study's current "
                f"result: {journal['why']}\n(swap {swap_id})\n",
            )
        os.replace(src, dest)
    # 2. install the new set, REPORT.md last
    for r, rel in _presenting_last([list(e) for e in install]):
        src = staging[r] / rel
        if src.is_file():
            dest = folders.root(r) / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
    # 3. the manifest names the new set (empty after a retire)
    _write_signed(folders.results / MANIFEST, "manifest", folders, {"files": [{"root": r, "path": rel} for r, rel in install]})
    for folder in staging.values():
        _remove_staging(folder)
    (folders.results / JOURNAL).unlink(missing_ok=True)


def _remove_staging(folder: Path) -> None:
    """Remove a staging folder the tool named (never a link planted at its name)."""
    if folder.is_symlink():
        return
    shutil.rmtree(folder, ignore_errors=True)


def _swap(folders: Folders, why: str, install: list[tuple[str, str]], swap_id: str) -> list[Path]:
    old = read_manifest(folders)
    journal = {"id": swap_id, "why": why, "retire": [[r, rel] for r, rel, _ in old], "install": [list(e) for e in install]}
    _check_moves(folders, journal, folders.results / MANIFEST)
    _write_signed(folders.results / JOURNAL, "journal", folders, journal)
    _roll_forward(folders, journal)
    return [p for _, _, p in old]


def recover(folders: Folders) -> bool:
    """Complete a swap a kill interrupted (its journal is still there); True if one was.
    A journal the tool did not write for this folder is refused (UntrustedRecordError)
    and left in place. Also removes staging folders no journal names (a report killed
    while writing), found by listing the study's folders."""
    path = folders.results / JOURNAL
    done = False
    if path.is_file() or path.is_symlink():
        journal = _read_signed(path, "journal", folders)
        _check_moves(folders, journal, path)
        _roll_forward(folders, journal)
        done = True
    for folder in (folders.results, folders.outputs):
        if folder.is_dir():
            for p in folder.iterdir():
                if p.name.startswith(STAGING_PREFIX) and p.is_dir() and not p.is_symlink():
                    _remove_staging(p)
    return done


def retire(folders: Folders, why: str) -> list[Path]:
    """Move every file the manifest says the tool wrote to ``stale/`` (with WHY.txt), so
    that no folder presents a result that is not current; return what moved. A user's
    file is never touched."""
    with _locked(folders):
        recover(folders)
        return _swap(folders, why, [], uuid.uuid4().hex)


def retire_study(study: Study, why: str) -> list[Path]:
    """:func:`retire` for a study's folders (after :func:`check_output_folders`)."""
    check_output_folders(study)
    return retire(Folders.of(study), why)


def write_artefact_set(folders: Folders, why_old: str, produce: Callable[[Path, Path], None]) -> list[Path]:
    """Have ``produce(results_stage, outputs_stage)`` write a new report set into two
    staging folders, then swap it in whole: the old set goes to stale/, the new one takes
    its place, the manifest names it. If ``produce`` raises, or the swap is refused
    (a planted record, a symlinked folder), nothing changes but the staging folders'
    removal. Returns the new files' final paths."""
    swap_id = uuid.uuid4().hex
    staging = _staging(folders, swap_id)
    with _locked(folders):
        recover(folders)
        for p in staging.values():
            p.mkdir(parents=True, exist_ok=True)
        try:
            produce(staging["results"], staging["outputs"])
            install = [
                (r, f.relative_to(staging[r]).as_posix())
                for r in ROOTS
                for f in sorted(staging[r].rglob("*"))
                if f.is_file() and not f.name.endswith(".tmp")
            ]
            _swap(folders, why_old, install, swap_id)
        except BaseException:
            if not (folders.results / JOURNAL).is_file():  # a swap under way is completed by recover()
                for p in staging.values():
                    _remove_staging(p)
            raise
    return [folders.root(r) / rel for r, rel in install]
