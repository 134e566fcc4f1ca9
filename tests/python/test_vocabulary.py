"""One word, one meaning: docs/CONTRACTS.md's Vocabulary table held to the package's names.

The table gives each overloaded word (run, report, check, demo, settings, key) the one
meaning a user types, and says where a public name may use it: in the modules of its
fourth column, or in the forms of its fifth. This test reads that table and checks every
module of lookahead/ and llm_jobs/ and every public function and class at a module's
top level, so a new name that uses a word for a meaning the table gives another word
fails here with the name, its module and the row it breaks."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "docs" / "CONTRACTS.md"
PACKAGES = ("lookahead", "llm_jobs")
HEADING = "## Vocabulary"


@dataclass(frozen=True)
class Word:
    """One row of the table: the word's forms, the modules whose names may use it
    (``*``: every module) and the patterns a name may match anywhere."""

    forms: tuple[str, ...]
    homes: tuple[str, ...]
    anywhere: tuple[re.Pattern[str], ...]


def _cells(line: str) -> list[str]:
    """A markdown table row's cells (a ``\\|`` inside a cell is text, not a border)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def vocabulary(text: str | None = None) -> list[Word]:
    """The rows of the Vocabulary section's table."""
    text = CONTRACTS.read_text(encoding="utf-8") if text is None else text
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [_cells(line) for line in section.splitlines() if line.startswith("| `")]
    words = []
    for cells in rows:
        assert len(cells) == 5, f"a Vocabulary row has 5 cells, not {len(cells)}: {cells}"
        forms, _meaning, _others, homes, anywhere = cells
        words.append(
            Word(
                tuple(re.findall(r"`([a-z]+)`", forms)),
                tuple(re.findall(r"`([a-z_.*]+)`", homes)),
                tuple(re.compile(p) for p in re.findall(r"`([^`]+)`", anywhere)),
            )
        )
    return words


def words_of(name: str) -> list[str]:
    """A name's words, lower-cased: split at ``.`` and ``_`` and before capitals
    (``KeyIndex`` -> key, index; ``run_all`` -> run, all)."""
    return [w.lower() for part in re.split(r"[._]", name) for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", part)]


def covers(home: str, module: str) -> bool:
    return home == "*" or module == home or module.startswith(home + ".")


def breaches(module: str, name: str, table: list[Word]) -> list[str]:
    """How ``name`` (a module's dotted name, or a public name at its top level) breaks
    the table: one line per row it breaks."""
    out = []
    used = set(words_of(name))
    for word in table:
        if not used & set(word.forms) or any(covers(h, module) for h in word.homes) or any(p.search(name) for p in word.anywhere):
            continue
        out.append(
            f"{module}: {name!r} uses {word.forms[0]!r} in another meaning; its names live in "
            f"{', '.join(word.homes)} (docs/CONTRACTS.md, Vocabulary)"
        )
    return out


def package_names(root: Path = ROOT) -> list[tuple[str, str]]:
    """(module, name) for every module of the packages (its dotted name as the name)
    and every public function and class at its top level."""
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((module, module))
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                    out.append((module, node.name))
    return out


def test_every_name_uses_each_word_in_its_one_meaning():
    table = vocabulary()
    found = [line for module, name in package_names() for line in breaches(module, name, table)]
    assert not found, "\n".join(found)


def test_the_table_holds_the_six_words_and_names_real_modules():
    """Every word the issue found overloaded has a row, and a home that no longer exists
    (a module renamed or deleted) is caught rather than silently covering nothing."""
    table = vocabulary()
    forms = {f for w in table for f in w.forms}
    assert {"run", "report", "check", "demo", "settings", "key"} <= forms
    modules = {m for m, _ in package_names()}
    stale = [h for w in table for h in w.homes if h != "*" and not any(covers(h, m) for m in modules)]
    assert not stale, f"Vocabulary homes that name no module: {stale}"


@pytest.mark.parametrize(
    ("module", "name", "broken"),
    [
        # the names the table renamed, planted back: each breaks its word's row
        ("lookahead.runs", "lookahead.runs", "run"),
        ("llm_jobs.run_plan", "llm_jobs.run_plan", "run"),
        ("llm_jobs.jobs_plan", "confirmed_run", "run"),
        ("lookahead.pages.summary", "Check", "check"),
        ("lookahead.claims.inputs", "validate_instances", "validation"),
        ("lookahead.pages.sections", "key_figures", "key"),
        ("lookahead.pages.compare", "key_frame", "key"),
        ("lookahead.claims.tables", "instance_key", "key"),
        # new names a change might bring
        ("lookahead.stats.protocol", "ProtocolReport", "report"),
        ("lookahead.paper.synthetic", "demo_panel", "demo"),
        ("lookahead.backends.base", "BackendConfig", "config"),
    ],
)
def test_a_name_in_another_meaning_fails(module, name, broken):
    found = breaches(module, name, vocabulary())
    assert len(found) == 1 and f"uses {broken!r}" in found[0], found


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("lookahead.cli", "report"),  # the command
        ("llm_jobs.forecast", "run"),  # the verb: a job's run
        ("lookahead.stopping", "run_child"),
        ("lookahead.config", "check_setting"),  # check_<what>
        ("lookahead.backends.openai_backend", "api_key_header"),  # the API key
        ("lookahead.keys", "row_key"),  # the cache key, at home
        ("lookahead.pages.summary", "checklist"),  # another word than check
    ],
)
def test_a_name_in_its_meaning_passes(module, name):
    assert breaches(module, name, vocabulary()) == []


def test_a_planted_module_fails_the_scan(tmp_path):
    """The scan itself, on a tree with one planted module: its name and its public
    names in other meanings are found, a private name and a name at home are not."""
    (tmp_path / "lookahead" / "stats").mkdir(parents=True)
    (tmp_path / "lookahead" / "stats" / "report_tables.py").write_text(
        "def key_figures(): ...\nclass Check: ...\ndef _run_key(): ...\ndef check_panel(): ...\ndef run_protocol(): ...\n",
        encoding="utf-8",
    )
    (tmp_path / "lookahead" / "keys.py").write_text("def row_key(): ...\n", encoding="utf-8")
    table = vocabulary()
    found = [line for module, name in package_names(tmp_path) for line in breaches(module, name, table)]
    assert [line.split(" in another meaning")[0] for line in found] == [
        "lookahead.stats.report_tables: 'lookahead.stats.report_tables' uses 'report'",
        "lookahead.stats.report_tables: 'key_figures' uses 'key'",
        "lookahead.stats.report_tables: 'Check' uses 'check'",
    ]


def test_a_planted_row_and_module_are_read_from_the_text():
    """The table is read, not hard-coded: a copy of the section with a row for a new
    word, and a module whose name uses it, fail together."""
    text = CONTRACTS.read_text(encoding="utf-8").replace(
        "| `run` `runs` |", "| `ledger` | a planted word | - | `lookahead.keys` | |\n| `run` `runs` |", 1
    )
    table = vocabulary(text)
    assert breaches("lookahead.cache.ledger", "lookahead.cache.ledger", table)
    assert not breaches("lookahead.keys", "LedgerLine", table)
    assert not breaches("lookahead.cache.ledger", "lookahead.cache.ledger", vocabulary())


def test_words_of_splits_snake_camel_and_dots():
    assert words_of("KeyIndex") == ["key", "index"]
    assert words_of("llm_jobs.run_all") == ["llm", "jobs", "run", "all"]
    assert words_of("LabelCheck") == ["label", "check"]
    assert words_of("HTTPServer") == ["http", "server"]
    assert words_of("checklist_frame") == ["checklist", "frame"]
