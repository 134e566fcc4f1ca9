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

A results or outputs folder that is the data folder, the raw folder or the project root
(or holds the project) is refused in one line (:func:`check_output_folders`), before
anything is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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


class OutputFolderError(ValueError):
    """A results or outputs folder the tool may not write its report into; one line."""


@dataclass(frozen=True)
class Folders:
    """Where a study's report goes: the results folder (REPORT.md, CSVs, tables/,
    figures/, do-file) and the outputs folder (.dta panels)."""

    results: Path
    outputs: Path

    @classmethod
    def of(cls, study: "Study") -> "Folders":
        return cls(Path(study.results_dir).resolve(), Path(study.outputs_dir).resolve())

    def root(self, name: str) -> Path:
        return self.results if name == "results" else self.outputs


def check_output_folders(study: "Study") -> None:
    """Refuse (OutputFolderError, one line naming the setting) a results_dir or
    outputs_dir that is the data folder, a raw folder, or the project root or a folder
    above it: the report moves files in and out of those folders, which must hold nothing
    else the study needs. Why equality and not "inside": a results folder inside the
    project (the default) is fine, and the retire step only moves what the manifest
    lists."""
    root = Path(study.root).resolve()
    forbidden = {root: "the project root"}
    if study.input.data_path:
        forbidden.setdefault(study.resolve(study.input.data_path).resolve().parent,
                             "the data folder (data_path)")
    for setting, value in (("raw_dir", study.output.raw_dir), ("claims_raw_dir", study.claims.claims_raw_dir)):
        if value:
            forbidden.setdefault(study.resolve(value).resolve(), f"the raw folder ({setting})")
    for setting, folder in (("results_dir", study.results_dir), ("outputs_dir", study.outputs_dir)):
        here = Path(folder).resolve()
        what = forbidden.get(here) or ("a folder that holds the project" if here in root.parents else None)
        if what:
            raise OutputFolderError(
                f"setting '{setting}': {here} is {what}; the report moves its own files in and out "
                f"of this folder, so point {setting} at a folder of its own (e.g. results/{study.name})")


# --- the manifest ----------------------------------------------------------------------


def _legacy_entries(folders: Folders) -> list[tuple[str, str]]:
    """What a results folder written before manifests holds of the tool's, by the exact
    names the report writes (never a pattern such as *.csv that a user's file matches)."""
    from lookahead.paper.table5_reading import TABLE5_READING
    from lookahead.report_names import REGRESSIONS, TABLES

    names = [*PRESENTING, "reghdfe.do", f"{TABLE5_READING}.csv", *(f"{t}.csv" for t in TABLES),
             *(f"regression_{spec}_{sample}.csv" for spec, sample in REGRESSIONS)]
    from lookahead.paper.report_section import TITLES

    names += [f"tables/{t}.tex" for t in ("table1_pre", "table1_post", *TITLES)]
    names += [f"figures/{n}.png" for n in ("lap_hist", "accuracy_by_lap_decile", "bootstrap", "claims_shapley")]
    found = [("results", n) for n in names if (folders.results / n).is_file()]
    found += [("outputs", n) for n in ("panel_pre.dta", "panel_post.dta") if (folders.outputs / n).is_file()]
    return found


def read_manifest(folders: Folders) -> list[tuple[str, str, Path]]:
    """(root name, relative path, absolute path) of each file the tool's last report
    wrote that is still there. The manifest records the folders it was written for, so
    a changed outputs_dir still finds the old panels."""
    path = folders.results / MANIFEST
    if not path.is_file():
        return [(r, rel, folders.root(r) / rel) for r, rel in _legacy_entries(folders)]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        roots = {r: Path(data["folders"][r]) for r in ROOTS}
        files = [(str(f["root"]), str(f["path"])) for f in data["files"]]
    except (ValueError, KeyError, TypeError):  # unreadable: fall back to the exact names
        return [(r, rel, folders.root(r) / rel) for r, rel in _legacy_entries(folders)]
    out = []
    for r, rel in files:
        if r not in roots or Path(rel).is_absolute() or ".." in Path(rel).parts:
            continue  # a manifest names files under its folders only
        p = roots[r] / rel
        if p.is_file():
            out.append((r, rel, p))
    return out


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


# --- the journalled swap ---------------------------------------------------------------


@contextlib.contextmanager
def _locked(folders: Folders) -> Iterator[None]:
    """One swap at a time per results folder (two reports of one study at once)."""
    folders.results.mkdir(parents=True, exist_ok=True)
    with open(folders.results / LOCK, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _presenting_last(entries: list[list[str]]) -> list[list[str]]:
    """Entries in move order for the new set: REPORT.md last."""
    return sorted(entries, key=lambda e: (e[1] in PRESENTING, e[1]))


def _stale_folder(base: Path, swap_id: str) -> Path:
    """``base/stale`` for this swap: an older stale/ (another swap's) is first renamed to
    the next free ``stale.N``, never deleted."""
    stale = base / STALE_FOLDER
    why = stale / WHY_FILE
    if stale.exists() and not (why.is_file() and swap_id in why.read_text(encoding="utf-8", errors="replace")):
        n = 1
        while (base / f"{STALE_FOLDER}.{n}").exists():
            n += 1
        os.replace(stale, base / f"{STALE_FOLDER}.{n}")
    return stale


def _roll_forward(journal: dict) -> None:
    """Carry out a swap's moves; every step checks what is already done, so running it
    again after a kill completes the swap (idempotent)."""
    swap_id = journal["id"]
    roots = {r: Path(p) for r, p in journal["folders"].items()}
    old_roots = {r: Path(p) for r, p in journal.get("old_folders", journal["folders"]).items()}
    staging = {r: Path(p) for r, p in journal.get("staging", {}).items()}
    new = {(r, rel) for r, rel in journal["install"]}
    # 1. retire the old set, REPORT.md first
    for r, rel in sorted(journal["retire"], key=lambda e: (e[1] not in PRESENTING, e[1])):
        src = old_roots[r] / rel
        if not src.is_file():
            continue
        if (r, rel) in new and old_roots[r] == roots[r] and not (staging[r] / rel).is_file():
            continue  # already replaced by the new file
        stale = _stale_folder(old_roots[r], swap_id)
        dest = stale / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        why = stale / WHY_FILE
        if not why.is_file():
            why.write_text(f"These files were moved here because they no longer show the study's current "
                           f"result: {journal['why']}\n(swap {swap_id})\n", encoding="utf-8")
        os.replace(src, dest)
    # 2. install the new set, REPORT.md last
    for r, rel in _presenting_last([list(e) for e in journal["install"]]):
        src = staging[r] / rel
        if src.is_file():
            dest = roots[r] / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
    # 3. the manifest names the new set (empty after a retire)
    _write_json(roots["results"] / MANIFEST, {"folders": {r: str(p) for r, p in roots.items()},
                                              "files": [{"root": r, "path": rel} for r, rel in journal["install"]]})
    for folder in staging.values():
        shutil.rmtree(folder, ignore_errors=True)  # the staging folder the tool made (now empty)
    (roots["results"] / JOURNAL).unlink(missing_ok=True)


def _swap(folders: Folders, why: str, install: list[tuple[str, str]], staging: dict[str, Path],
          swap_id: str) -> list[Path]:
    old = read_manifest(folders)
    old_roots = dict(folders.__dict__)
    if (folders.results / MANIFEST).is_file():
        try:
            old_roots = {r: Path(p) for r, p in
                         json.loads((folders.results / MANIFEST).read_text(encoding="utf-8"))["folders"].items()}
        except (ValueError, KeyError, TypeError):
            pass
    journal = {"id": swap_id, "why": why, "folders": {r: str(folders.root(r)) for r in ROOTS},
               "old_folders": {r: str(old_roots.get(r, folders.root(r))) for r in ROOTS},
               "staging": {r: str(p) for r, p in staging.items()},
               "retire": [[r, rel] for r, rel, _ in old], "install": [list(e) for e in install]}
    _write_json(folders.results / JOURNAL, journal)
    _roll_forward(journal)
    return [p for _, _, p in old]


def recover(folders: Folders) -> bool:
    """Complete a swap a kill interrupted (its journal is still there); True if one was.
    Also removes staging folders no journal names (a report killed while writing)."""
    path = folders.results / JOURNAL
    done = False
    if path.is_file():
        try:
            journal = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:  # torn journal: written before any move (it is replaced atomically)
            journal = None
        if journal:
            _roll_forward(journal)
            done = True
        path.unlink(missing_ok=True)
    for folder in (folders.results, folders.outputs):
        if folder.is_dir():
            for p in folder.iterdir():
                if p.is_dir() and p.name.startswith(STAGING_PREFIX):
                    shutil.rmtree(p, ignore_errors=True)
    return done


def retire(folders: Folders, why: str) -> list[Path]:
    """Move every file the manifest says the tool wrote to ``stale/`` (with WHY.txt), so
    that no folder presents a result that is not current; return what moved. A user's
    file is never touched."""
    with _locked(folders):
        recover(folders)
        return _swap(folders, why, [], {}, uuid.uuid4().hex)


def retire_study(study: "Study", why: str) -> list[Path]:
    """:func:`retire` for a study's folders (after :func:`check_output_folders`)."""
    check_output_folders(study)
    return retire(Folders.of(study), why)


def write_artefact_set(folders: Folders, why_old: str,
                       produce: Callable[[Path, Path], None]) -> list[Path]:
    """Have ``produce(results_stage, outputs_stage)`` write a new report set into two
    staging folders, then swap it in whole: the old set goes to stale/, the new one takes
    its place, the manifest names it. If ``produce`` raises, nothing changes but the
    staging folders' removal. Returns the new files' final paths."""
    swap_id = uuid.uuid4().hex
    staging = {r: folders.root(r) / f"{STAGING_PREFIX}{swap_id}" for r in ROOTS}
    with _locked(folders):
        recover(folders)
        for p in staging.values():
            p.mkdir(parents=True, exist_ok=True)
        try:
            produce(staging["results"], staging["outputs"])
        except BaseException:
            for p in staging.values():
                shutil.rmtree(p, ignore_errors=True)
            raise
        install = [(r, f.relative_to(staging[r]).as_posix()) for r in ROOTS
                   for f in sorted(staging[r].rglob("*")) if f.is_file() and not f.name.endswith(".tmp")]
        _swap(folders, why_old, install, staging, swap_id)
    return [folders.root(r) / rel for r, rel in install]
