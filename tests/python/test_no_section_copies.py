"""No hand-written class copies a field of a generated settings section.

The sections (lookahead/settings_sections.py, generated from lookahead/study_settings.yml)
are the one typed declaration of every setting. A dataclass that re-declares a setting as
a field of its own (``cluster``, or ``draws`` for ``wild_bootstrap_draws``) states its
type and default a second time, and has to be filled field by field from the study: the
copies this test replaced (the statistics', the wild bootstrap's, the paper's and the
claim pipeline's settings) drifted in name from the sections they copied. A type that
needs several sections holds them (``StatsSections``), and what it derives is a property.

A field matches a setting when it has the setting's name, or the setting's name less a
prefix (``draws`` for ``wild_bootstrap_draws``, ``bm25_k`` for ``claims_bm25_k``). The
classes below whose fields match by name but are not settings say why."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from lookahead import settings_sections
from lookahead.config import PROJECT_ROOT
from lookahead.settings_sections import Section

CODE = ("lookahead", "llm_jobs", "python_models")
GENERATED = Path("lookahead/settings_sections.py")

#: (file, class) -> why its fields that share a name with a setting are not copies of it.
NOT_COPIES: dict[tuple[str, str], str] = {
    ("lookahead/stats/fe_regression.py", "FitRequest"): (
        "one regression's own cluster and Newey-West lag: the paper's Table VI clusters by entity "
        "whatever paper_cluster says, so each caller passes the regression's"
    ),
    ("lookahead/stats/verdict.py", "VerdictFacts"): "the verdict table's columns: the measure and cluster it was reached under",
    ("lookahead/stats/verdict.py", "TestFact"): "a result: the bootstrap draws a p-value used (extended when borderline)",
    ("lookahead/stats/wild.py", "WildResult"): "a result: the bootstrap draws a p-value used (extended when borderline)",
    ("lookahead/stats/wild.py", "_CrossedEffects"): "the rows' cluster codes, an array",
    ("lookahead/paper/bootstrap.py", "BootstrapResult"): "a result: the bootstrap's draws (an array) and the seed they came from",
    ("lookahead/backends/base.py", "Generation"): "one query's rendered prompt text, not the forecast_prompt template",
    ("llm_jobs/queries.py", "Query"): "one query's rendered prompt text, not the forecast_prompt template",
    ("lookahead/prompts.py", "LabelCheck"): "the labels a tokenizer check scores with (synonyms substituted), derived",
    ("lookahead/consent.py", "Destination"): "the URL a consent decision is about, checked as an http(s) URL by its backend",
    ("lookahead/pages/sections.py", "ResultTables"): "the resolved folder a report reads (null results_dir: results/<study>)",
    ("lookahead/demo/generator.py", "DemoSpec"): "the demo generator's parameters, which write a study file rather than read one",
    ("lookahead/demo/train.py", "TrainSpec"): "the demo models' training batch and seed, not the study's query batch or seed",
}


def section_fields() -> dict[str, str]:
    """Every setting's name -> the generated section that declares it."""
    out: dict[str, str] = {}
    for name in dir(settings_sections):
        cls = getattr(settings_sections, name)
        if isinstance(cls, type) and issubclass(cls, Section) and cls is not Section:
            out.update({f.name: cls.__name__ for f in fields(cls)})
    return out


def short_names(settings: dict[str, str]) -> dict[str, str]:
    """A setting's name less a prefix its section's settings share (``claims_``,
    ``wild_bootstrap_``, ``paper_``) -> the setting: the name a copy gives its field.
    A prefix counts when three or more settings of one section begin with it (two
    would make generic words of ``model_id`` and ``model_path``: ``id``, ``path``)."""
    by_section: dict[str, list[str]] = {}
    for setting, section in settings.items():
        by_section.setdefault(section, []).append(setting)
    out: dict[str, str] = {}
    for names in by_section.values():
        for setting in names:
            parts = setting.split("_")
            for i in range(1, len(parts)):
                prefix = "_".join(parts[:i]) + "_"
                if sum(n.startswith(prefix) for n in names) >= 3:
                    out.setdefault("_".join(parts[i:]), setting)
    return out


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            return True
    return False


def _fields(node: ast.ClassDef) -> list[str]:
    """The dataclass's own fields: annotated names in its body, ClassVars left out."""
    out = []
    for stmt in node.body:
        named = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
        if named and "ClassVar" not in ast.unparse(stmt.annotation):  # type: ignore[union-attr]
            out.append(stmt.target.id)  # type: ignore[union-attr]
    return out


def matching_setting(field: str, settings: dict[str, str], short: dict[str, str]) -> str | None:
    """The setting a field copies: its own name, or the name less its section's prefix."""
    return field if field in settings else short.get(field)


def copies(root: Path) -> dict[tuple[str, str], list[str]]:
    """(file, class) -> 'field (setting of Section)' for every hand-written dataclass field
    that matches a setting, under the package folders of ``root``."""
    settings = section_fields()
    short = short_names(settings)
    found: dict[tuple[str, str], list[str]] = {}
    for folder in CODE:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == GENERATED:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and _is_dataclass(node):
                    hits = []
                    for f in _fields(node):
                        s = matching_setting(f, settings, short)
                        if s is not None:
                            hits.append(f"{f} ({s} of {settings[s]})")
                    if hits:
                        found[(rel.as_posix(), node.name)] = hits
    return found


def test_no_hand_written_class_copies_a_section_field():
    found = {k: v for k, v in copies(PROJECT_ROOT).items() if k not in NOT_COPIES}
    assert not found, "hand-written classes re-declare settings of a generated section (hold the section instead): " + "; ".join(
        f"{file}:{cls}: {', '.join(hits)}" for (file, cls), hits in sorted(found.items())
    )


def test_each_named_exception_still_matches():
    """An exception that no longer matches a setting is stale and is removed here."""
    found = copies(PROJECT_ROOT)
    assert not [k for k in NOT_COPIES if k not in found]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("@dataclass(frozen=True)\nclass W:\n    draws: int = 999\n    weights: str = 'webb'\n", ["draws", "weights"]),
        ("@dataclasses.dataclass\nclass C:\n    bm25_k: int\n    cluster: str\n", ["bm25_k", "cluster"]),
        ("@dataclass\nclass Holder:\n    protocol: object\n    llm: ClassVar[str] = 'mu_hat'\n", []),
        ("class NotADataclass:\n    cluster: str\n", []),
    ],
)
def test_the_check_sees_a_copy(tmp_path, source, expected):
    """The check flags a field named as a setting, or as a setting less its prefix, in a
    dataclass (the copies it replaced: ``draws`` of wild_bootstrap_draws, ``bm25_k`` of
    claims_bm25_k), and not a section held whole or a class constant."""
    pkg = tmp_path / "lookahead"
    pkg.mkdir()
    (pkg / "m.py").write_text(source, encoding="utf-8")
    found = copies(tmp_path)
    assert [h.split(" ")[0] for h in found.get(("lookahead/m.py", source.split("class ")[1].split(":")[0]), [])] == expected
