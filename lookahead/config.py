"""The study settings: one declaration, one loader, one typed object.

Every setting is declared once, in ``lookahead/study_settings.yml`` (type, allowed
values, default or "identifies the study", one line of meaning). This module reads that
declaration and is the only code that checks settings: the LLM jobs, the statistics, the
paper tables and the report load a :class:`Study` here, and dbt's run-start check hands
its vars to :func:`check_dbt_vars` through the project's DuckDB plugin
(``lookahead/dbt_plugin.py``). The vars block of ``dbt_project.yml`` is generated from
the declaration and the default study (``python scripts/generated_files.py --write-dbt-vars``),
so plain ``dbt build`` builds the demo study with the same values the jobs use.

Why so strict: a typo in a cutoff or a study file that forgets its model must stop the
study before any query is paid for, with one line naming the setting, rather than fall
back to the demo's values.

Paths inside a study (``data_path``, ``raw_dir``, ...) are relative to the project
folder (where ``dbt_project.yml`` is), whichever folder a command runs from, because
that is where dbt resolves them; a study *file* given on the command line is relative to
the working directory, like any file argument.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import math
import os
import textwrap
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from lookahead import untrusted
from lookahead.errors import StudyConfigError
from lookahead.settings_sections import Section, StudySections

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = Path(__file__).with_name("study_settings.yml")

PROTOCOL_COLUMNS = (
    "row_id",
    "entity_id",
    "entity_name",
    "ticker",
    "text",
    "text_date",
    "target_date",
    "outcome",
)
OPTIONAL_COLUMNS = ("row_id", "ticker")
TYPES = ("string", "text", "path", "date", "integer", "number", "boolean", "choice", "mapping", "list", "column_map")


@dataclass(frozen=True)
class SettingSpec:
    """One declared setting (an entry of study_settings.yml)."""

    name: str
    type: str
    meaning: str
    concern: str
    dbt: bool = False
    identifies: bool = False
    default: Any = None
    allowed: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    exclusive_min: float | None = None
    required_when: dict[str, tuple[str, ...]] = field(default_factory=dict)
    keys: tuple[str, ...] = ()
    values: str | None = None
    operational: bool = False

    def required(self, values: Mapping[str, Any]) -> bool:
        """Whether this identifying setting must be given, under the other settings."""
        if not self.identifies:
            return False
        return all(values.get(k) in allowed for k, allowed in self.required_when.items())


@dataclass(frozen=True)
class Schema:
    settings: dict[str, SettingSpec]
    default_study: str
    concerns: dict[str, str] = field(default_factory=dict)  # concern -> what its section holds

    def names(self) -> list[str]:
        return list(self.settings)

    def defaults(self) -> dict[str, Any]:
        return {n: s.default for n, s in self.settings.items() if not s.identifies}


def _allowed(d: dict[str, Any]) -> tuple[str, ...]:
    """A setting's allowed values: listed, or `allowed_from: measures` (the LAP measure
    registry, lookahead/measures.py, their one home)."""
    if d.get("allowed_from") == "measures":
        from lookahead.measures import MEASURES

        return tuple(MEASURES)
    return tuple(d.get("allowed", ()))


def _load_schema(path: Path = SCHEMA_PATH) -> Schema:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    specs: dict[str, SettingSpec] = {}
    for name, d in doc["settings"].items():
        if d["type"] not in TYPES:
            raise StudyConfigError(f"{path}: setting '{name}' has unknown type '{d['type']}'")
        if d.get("identifies") == ("default" in d):
            raise StudyConfigError(f"{path}: setting '{name}' needs exactly one of identifies/default")
        if d.get("concern") not in doc["concerns"]:
            raise StudyConfigError(f"{path}: setting '{name}' needs a concern, one of {', '.join(doc['concerns'])}")
        specs[name] = SettingSpec(
            name=name,
            type=d["type"],
            meaning=d["meaning"],
            concern=d["concern"],
            dbt=bool(d.get("dbt")),
            identifies=bool(d.get("identifies")),
            default=d.get("default"),
            allowed=_allowed(d),
            min=d.get("min"),
            max=d.get("max"),
            exclusive_min=d.get("exclusive_min"),
            required_when={k: tuple(v) for k, v in (d.get("required_when") or {}).items()},
            keys=tuple(d.get("keys", ())),
            values=d.get("values"),
            operational=bool(d.get("operational")),
        )
    return Schema(specs, doc["default_study"], dict(doc["concerns"]))


SCHEMA = _load_schema()


def setting_default(name: str) -> Any:
    """A setting's declared default: what code reads instead of writing its own."""
    return SCHEMA.settings[name].default


def check_setting(name: str, value: Any) -> Any:
    """One setting's value checked by its declared rule (None: the declared default).

    For code that receives a single setting outside a resolved ``Study`` (a job flag, a
    test calling a row function directly): it reads the schema's rule instead of
    writing its own."""
    if name not in SCHEMA.settings:
        raise _unknown_key_error(name)
    spec = SCHEMA.settings[name]
    if value is None or value == "":
        return spec.default
    return _check_value(spec, value)


def check_section_names(given: Mapping[str, Any], *sections: type[Section]) -> None:
    """Raise TypeError naming each of ``given`` that none of ``sections`` declares.

    Why: a type built from several generated sections (lookahead.stats.protocol.StatsSections,
    lookahead.paper.tables.PaperSections) takes settings by their study names outside a
    study, and a misspelt one must fail rather than leave its setting at the default."""
    known = {f.name for cls in sections for f in fields(cls)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise TypeError(f"not a setting of section(s) {', '.join(c.__name__ for c in sections)}: {', '.join(unknown)}")


CHOICES: dict[str, tuple[str, ...]] = {n: s.allowed for n, s in SCHEMA.settings.items() if s.type == "choice"}


# --- checking one value --------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_date(value: Any, name: str) -> dt.date:
    """A date setting: 'YYYY-MM-DD' (or a YAML date). A bare number is refused, because
    YAML reads an unquoted 20231231 or 2023 as a number, not a date; an unquoted
    2023-12-31 is refused too (README): YAML turns it into a date object, which dbt's
    --vars then hands around as something other than the text of the study file."""
    if isinstance(value, (dt.date, dt.datetime)):
        raise StudyConfigError(f"setting '{name}': {value} is unquoted; write it quoted, '{value.isoformat()[:10]}'")
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise StudyConfigError(f"setting '{name}': {value!r} is not a date (write it quoted, 'YYYY-MM-DD')")


def _check_value(spec: SettingSpec, v: Any) -> Any:
    """The value in its declared type, within the bounds of a value from someone else's
    file (lookahead/untrusted.py), or StudyConfigError."""
    return untrusted.check_value(spec, _check_typed(spec, v))


def _check_typed(spec: SettingSpec, v: Any) -> Any:
    """The value in its declared type (dates as 'YYYY-MM-DD' text), or StudyConfigError."""
    n, t = spec.name, spec.type
    if t in ("string", "text", "path"):
        if not isinstance(v, str) or not v.strip():
            raise StudyConfigError(f"setting '{n}': {v!r} is not a non-empty text")
        return v
    if t == "date":
        return parse_date(v, n).isoformat()
    if t == "boolean":
        if not isinstance(v, bool):
            raise StudyConfigError(f"setting '{n}': {v!r} is not true or false")
        return v
    if t in ("integer", "number"):
        ok = _is_number(v) and (t == "number" or float(v).is_integer())
        if not ok:
            kind = "a whole number" if t == "integer" else "a number"
            raise StudyConfigError(f"setting '{n}': {v!r} is not {kind}")
        v = int(v) if t == "integer" else float(v)
        if spec.min is not None and v < spec.min:
            raise StudyConfigError(f"setting '{n}': {v} is below its minimum {spec.min}")
        if spec.max is not None and v > spec.max:
            raise StudyConfigError(f"setting '{n}': {v} is above its maximum {spec.max}")
        if spec.exclusive_min is not None and v <= spec.exclusive_min:
            raise StudyConfigError(f"setting '{n}': {v} must be greater than {spec.exclusive_min}")
        return v
    if t == "choice":
        if v not in spec.allowed:
            raise StudyConfigError(f"setting '{n}': {v!r} is not one of {', '.join(spec.allowed)}")
        return v
    if t == "list":
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise StudyConfigError(f"setting '{n}' must be a list of names")
        if spec.allowed and (bad := [x for x in v if x not in spec.allowed]):
            raise StudyConfigError(f"setting '{n}': {', '.join(map(repr, bad))} is not one of {', '.join(spec.allowed)}")
        return v
    if t == "mapping":
        if not isinstance(v, dict):
            raise StudyConfigError(f"setting '{n}' must be a mapping (key: value)")
        for key in spec.keys:
            if not isinstance(v.get(key), str) or not v[key].strip():
                raise StudyConfigError(f"setting '{n}.{key}' is missing")
        if spec.values == "number":
            if not v:
                raise StudyConfigError(f"setting '{n}' must be a non-empty mapping")
            for key, x in v.items():
                if not _is_number(x):
                    raise StudyConfigError(f"setting '{n}.{key}': {x!r} is not a number")
        return v
    if t == "column_map":
        return _check_column_map(v)
    raise AssertionError(t)


def _check_column_map(cmap: Any) -> dict[str, str | None]:
    if not isinstance(cmap, dict):
        raise StudyConfigError("setting 'column_map' must map protocol columns to your column names")
    for col in cmap:
        if col not in PROTOCOL_COLUMNS:
            hint = difflib.get_close_matches(str(col), PROTOCOL_COLUMNS, n=1)
            raise StudyConfigError(
                f"setting 'column_map.{col}': not a protocol column"
                + (f" (did you mean '{hint[0]}'?)" if hint else f"; expected {', '.join(PROTOCOL_COLUMNS)}")
            )
    out: dict[str, str | None] = {}
    for col in PROTOCOL_COLUMNS:
        user = cmap.get(col)
        if user is None or user == "":
            if col not in OPTIONAL_COLUMNS:
                raise StudyConfigError(f"setting 'column_map.{col}' is missing")
            out[col] = None
        elif not isinstance(user, str):
            raise StudyConfigError(f"setting 'column_map.{col}': {user!r} is not a column name")
        else:
            out[col] = user
    return out


# --- a whole study -------------------------------------------------------------------

#: Settings a study file may still carry from an earlier version: name -> why it went.
#: Such a file gets one line saying so instead of "not a study setting".
REMOVED_SETTINGS: dict[str, str] = {
    "wild_bootstrap_min_clusters": "the verdict reads the wild bootstrap p-value at every cluster count (docs/verdict.md)",
    "wild_bootstrap_max_clusters": "the wild bootstrap runs at every cluster count, without a "
    "dense design (lookahead/stats/wild.py)",
}


def _unknown_key_error(key: str) -> StudyConfigError:
    if key in REMOVED_SETTINGS:
        return StudyConfigError(f"setting '{key}' was removed: {REMOVED_SETTINGS[key]}; delete it from the study")
    hint = difflib.get_close_matches(str(key), SCHEMA.names(), n=1, cutoff=0.6)
    return StudyConfigError(
        f"setting '{key}' is not a study setting"
        + (f" (did you mean '{hint[0]}'?)" if hint else " (see lookahead/study_settings.yml)")
    )


def resolve(explicit: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Merge and check: the full, typed settings of a study.

    Without ``base``, ``explicit`` is a study of its own (a study file): every identifying
    setting must be among its keys and only declared defaults fill the rest, so nothing
    falls back to the demo. With ``base`` (a resolved study), ``explicit`` overrides it."""
    for key in explicit:
        if key not in SCHEMA.settings:
            raise _unknown_key_error(key)
    merged: dict[str, Any] = SCHEMA.defaults()
    if base is not None:
        merged.update(base)
    merged.update(explicit)
    for spec in SCHEMA.settings.values():
        if spec.required(merged) and (merged.get(spec.name) is None or merged.get(spec.name) == ""):
            raise StudyConfigError(
                f"setting '{spec.name}' is missing: a study must give it "
                "(identifying settings never fall back to the default study)"
            )
    out: dict[str, Any] = {}
    for name, spec in SCHEMA.settings.items():
        v = merged.get(name)
        if v is None or v == "":
            out[name] = None if spec.identifies else spec.default
            continue
        out[name] = _check_value(spec, v)
    mod = out.get("moderator_column")
    if mod and mod not in out["extra_columns"]:
        raise StudyConfigError(f"setting 'moderator_column': '{mod}' must be one of extra_columns")
    _check_measure_settings(out)
    return out


def _check_measure_settings(values: Mapping[str, Any]) -> None:
    """The settings the computed LAP measures require (their registry entries'
    `required_settings`, lookahead/measures.py): one clear line for the first one missing,
    here in the loader so that the jobs and dbt's run-start check stop on it before
    anything is asked."""
    from lookahead.measures import MEASURES

    names = [n for n in dict.fromkeys([values["lap_measure"], *(values["lap_measures"] or [])]) if n in MEASURES]
    for n in names:
        m = MEASURES[n]
        missing = [s for s in m.required_settings if values[s] in (None, "")]
        if missing:
            raise StudyConfigError(
                f"setting '{missing[0]}' is required when the study computes the '{n}' measure (lap_measure or lap_measures)"
            )
        if m.second_model and values[m.second_model] == values["model_id"]:
            raise StudyConfigError(
                f"setting '{m.second_model}': it names the target model itself "
                f"('{values['model_id']}'), so the {m.short} would compare the "
                "model with itself"
            )


EXTENDS_KEY = "extends"


def read_study_file(path: str | os.PathLike[str], _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A study file: a YAML mapping of settings, the same text `dbt build --vars` takes.

    A file may build on another with ``extends: <study file>`` (a path like every path
    in a study, relative to the project root): the base's settings, then this file's on
    top. Returned flattened (without ``extends``), so dbt and the jobs see one mapping."""
    p = Path(path)
    if not p.is_file():
        raise StudyConfigError(f"study file '{p}' does not exist (looked in {Path.cwd()})")
    try:
        untrusted.check_file_size(p.stat().st_size, f"study file '{p}'")
        data = untrusted.load_yaml(p.read_text(encoding="utf-8"), f"study file '{p}'") or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise StudyConfigError(f"study file '{p}' is not valid YAML{where}") from None
    except UnicodeDecodeError:
        raise StudyConfigError(f"study file '{p}' is not UTF-8 text") from None
    if not isinstance(data, dict):
        raise StudyConfigError(f"study file '{p}' must be a YAML mapping of settings")
    return flatten_study(data, f"study file '{p}'", (*_chain, p.resolve()))


def flatten_study(data: Mapping[str, Any], where: str = "--vars", _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A study's settings with its ``extends:`` chain applied: the base file's settings
    (read_study_file, relative to the project root), then these on top. One rule for a
    study file and for a study handed to `dbt build --vars "$(cat STUDY.yml)"`, so a file
    that extends another builds the same study both ways. ``where`` names the study in a
    message."""
    data = dict(data)
    if EXTENDS_KEY not in data:
        return data
    ref = data.pop(EXTENDS_KEY)
    if not isinstance(ref, str) or not ref.strip():
        raise StudyConfigError(f"{where}: '{EXTENDS_KEY}' must name a study file")
    base_path = Path(ref) if Path(ref).is_absolute() else PROJECT_ROOT / ref
    if base_path.resolve() in _chain:
        raise StudyConfigError(f"{where}: '{EXTENDS_KEY}: {ref}' loops back to a file it extends")
    if not base_path.is_file():
        raise StudyConfigError(
            f"{where}: '{EXTENDS_KEY}: {ref}': study file '{base_path}' does not exist "
            "(a relative path is relative to the project folder)"
        )
    return {**read_study_file(base_path, _chain), **data}


def default_study_path(root: Path = PROJECT_ROOT) -> Path:
    return root / SCHEMA.default_study


_V = TypeVar("_V")


def protocol_setting(name: str, value: _V | None) -> _V:
    """A setting every protocol study has but a claim-only one does not (data_path,
    column_map, training_cutoff): its value, or one line naming it when it is not set."""
    if value is None:
        raise StudyConfigError(f"setting '{name}' is missing: the lookahead-bias test (study_kind: protocol) needs it")
    return value


@dataclass(frozen=True)
class Study(StudySections):
    """A study's full, checked settings and its root.

    Code reads a setting through its typed section, ``study.<concern>.<setting>``
    (lookahead/settings_sections.py, generated from the declaration), never by its name
    in a string; ``vars`` (every setting by name) is for the loader, the settings JSON
    and the hash."""

    vars: dict[str, Any]
    root: Path = PROJECT_ROOT

    def with_settings(self, **changes: Any) -> Study:
        """This study with some settings replaced, each value checked by its declared rule
        (None: not set)."""
        return Study(
            vars={**self.vars, **{k: None if v is None else check_setting(k, v) for k, v in changes.items()}}, root=self.root
        )

    def resolve(self, path: str) -> Path:
        """A path setting's value resolved against the project root (as dbt resolves it)."""
        p = Path(str(path))
        return p if p.is_absolute() else self.root / p

    @property
    def name(self) -> str:
        return self.output.study_name

    @property
    def raw_dir(self) -> Path:
        return self.resolve(self.output.raw_dir)

    def raw_file(self, task: str) -> Path:
        return self.raw_dir / f"{task}.jsonl"

    @property
    def cutoff(self) -> dt.date:
        return dt.date.fromisoformat(protocol_setting("training_cutoff", self.protocol.training_cutoff))

    @property
    def data_file(self) -> Path:
        """The observations file (data_path), resolved against the root."""
        return self.resolve(protocol_setting("data_path", self.input.data_path))

    @property
    def column_map(self) -> dict[str, str | None]:
        """Protocol column -> the input's column name (column_map)."""
        return protocol_setting("column_map", self.input.column_map)

    @property
    def results_dir(self) -> Path:
        given = self.output.results_dir
        return self.resolve(given) if given else self.root / "results" / self.name

    @property
    def outputs_dir(self) -> Path:
        given = self.output.outputs_dir
        return self.resolve(given) if given else self.root / "outputs" / self.name

    @property
    def database(self) -> Path:
        """This study's DuckDB file (dbt builds into it through lookahead/dbt_plugin.py)."""
        return database_path(self.name, self.root)

    def settings_json(self) -> str:
        """Canonical JSON of every setting: what `study_settings` stores and hashes."""
        return json.dumps(self.vars, sort_keys=True, separators=(",", ":"), default=str)

    @property
    def settings_hash(self) -> str:
        """sha256 of the settings that can change a result (operational ones left out)."""
        kept = {k: v for k, v in self.vars.items() if not SCHEMA.settings[k].operational}
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def identity_hash(self) -> str:
        """sha256 of the settings that identify the study (``identifies: true`` in
        study_settings.yml: its name, data, model, prompts, labels, cutoff): what tells two
        studies apart when the build's source names no file (`dbt build --vars`), for the
        collision guard (lookahead.collision)."""
        kept = {k: v for k, v in self.vars.items() if SCHEMA.settings[k].identifies}
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @classmethod
    def from_json(cls, text: str, root: Path = PROJECT_ROOT) -> Study:
        """The study a dbt build recorded (table `study_settings`, column settings_json), or
        a resolved settings file (:func:`settings_file_study`).

        Decoded once per process and study: every dbt Python model of a build reads the same
        row, and a Study is immutable, so the models share one object. The decoded study is
        kept under the text it came from and under its own settings_json, so the plugin's
        decode of $LOOKAHEAD_STUDY_SETTINGS (the study's key order) serves the models'
        reads of the sorted settings_json that study_settings records."""
        key = (text, root)
        with _DECODED_LOCK:  # dbt runs Python models on several threads
            study = _DECODED.get(key)
            if study is None:
                study = _decode(text, root)
                for known in (key, (study.settings_json(), root)):
                    _DECODED[known] = study
                while len(_DECODED) > _DECODED_KEPT:
                    del _DECODED[next(iter(_DECODED))]  # the oldest first
        return study


#: Decoded studies by (text, root): :meth:`Study.from_json`'s cache, two keys per study.
_DECODED: dict[tuple[str, Path], Study] = {}
_DECODED_KEPT = 32
_DECODED_LOCK = threading.Lock()


def _decode(text: str, root: Path) -> Study:
    return Study(vars=resolve(json.loads(text)), root=root)


def load_study(
    study_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    root: Path = PROJECT_ROOT,
) -> Study:
    """The study from a file (or $LOOKAHEAD_STUDY, or the default study) plus overrides.
    The default study is read only when no file is named (a study never falls back to it)."""
    study_file = study_file or os.environ.get("LOOKAHEAD_STUDY") or None
    base = resolve(read_study_file(study_file or default_study_path(root)))
    merged = resolve(dict(overrides), base=base) if overrides else base
    return Study(vars=merged, root=root)


# --- typed sections (generated) -------------------------------------------------------

SECTIONS_PATH = Path(__file__).with_name("settings_sections.py")
_PY_TYPES = {
    "string": "str",
    "text": "str",
    "path": "str",
    "date": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "mapping": "dict[str, Any]",
    "list": "list[str]",
    "column_map": "dict[str, str | None]",
}


def section_class(concern: str) -> str:
    """The class name of a concern's section: ``backend`` -> ``BackendSettings``."""
    return "".join(w.capitalize() for w in concern.split("_")) + "Settings"


def _annotation(spec: SettingSpec) -> str:
    t = (
        f"Literal[{', '.join(repr(a) for a in spec.allowed)}]"
        if spec.type == "choice" and spec.allowed
        else _PY_TYPES.get(spec.type, "str")
    )
    always = spec.identifies and not spec.required_when
    return t if always or (spec.default is not None and not spec.identifies) else f"{t} | None"


def _default(spec: SettingSpec) -> str:
    if spec.identifies:
        return "None" if spec.required_when else ""
    if isinstance(spec.default, (list, dict)):
        return f"field(default_factory=lambda: {spec.default!r})"
    if spec.type == "number" and isinstance(spec.default, int) and not isinstance(spec.default, bool):
        return repr(float(spec.default))
    return repr(spec.default)


def _docstring(text: str, indent: str) -> list[str]:
    """A meaning as a docstring of lines a reader can read (wrapped at 92 characters)."""
    lines = textwrap.wrap(text.replace("\\", "\\\\").replace('"', '\\"'), 92)
    lines[0] = '"""' + lines[0]
    lines[-1] += '"""'
    return [indent + ln for ln in lines]


def sections_source(schema: Schema = SCHEMA) -> str:
    """The text of lookahead/settings_sections.py: one frozen dataclass per concern, its
    fields the concern's settings (declared types, defaults, meanings as docstrings)."""
    out = [
        '"""The study settings as typed sections, one per concern. GENERATED from',
        "lookahead/study_settings.yml by `python scripts/generated_files.py --write-sections`; do not edit",
        "(tests/python/test_settings.py fails when this file is stale).",
        "",
        "Why generated: the YAML stays the one declaration (type, default, meaning, concern), and",
        "a reader, a type checker or an editor still sees every field with its type and its",
        "meaning. A resolved :class:`lookahead.config.Study` hands the sections out",
        "(``study.backend.concurrency``); ``with_defaults`` builds one outside a study (a",
        "backend made by hand, a row function called directly), declared defaults filling the",
        'rest."""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Mapping",
        "from dataclasses import MISSING, dataclass, field, fields",
        "from functools import cached_property",
        "from typing import Any, ClassVar, Literal, TypeVar",
        "",
        'S = TypeVar("S", bound="Section")',
        "",
        "",
        "class Section:",
        '    """What every section shares: built from a resolved study\'s values, or by hand."""',
        "",
        "    # every section is a dataclass: declared here so dataclasses.fields() types on cls",
        "    __dataclass_fields__: ClassVar[dict[str, Any]]",
        "",
        "    @classmethod",
        "    def from_vars(cls: type[S], values: Mapping[str, Any]) -> S:",
        '        """The section of a resolved study (lookahead.config.resolve: every setting present)."""',
        "        return cls(**{f.name: values[f.name] for f in fields(cls)})",
        "",
        "    @classmethod",
        "    def with_defaults(cls: type[S], **given: Any) -> S:",
        '        """A section from the settings given (others ignored), declared defaults for the',
        "        rest and None for an identifying setting not given. For code outside a study;",
        '        values are not checked here (lookahead.config.check_setting checks one)."""',
        "        names = {f.name for f in fields(cls)}",
        "        required = {f.name: None for f in fields(cls)",
        "                    if f.default is MISSING and f.default_factory is MISSING}",
        "        return cls(**{**required, **{k: v for k, v in given.items() if k in names and v is not None}})",
    ]
    for concern, meaning in schema.concerns.items():
        specs = [sp for sp in schema.settings.values() if sp.concern == concern]
        out += [
            "",
            "",
            "@dataclass(frozen=True, kw_only=True)",
            f"class {section_class(concern)}(Section):",
            f'    """{meaning}"""',
            "",
        ]
        for sp in specs:
            d = _default(sp)
            out.append(f"    {sp.name}: {_annotation(sp)}" + (f" = {d}" if d else ""))
            out += _docstring(sp.meaning, "    ")
    out += [
        "",
        "",
        "class StudySections:",
        '    """The sections of a study, each built once from ``vars`` (the resolved settings)."""',
        "",
        "    vars: dict[str, Any]",
    ]
    for concern, meaning in schema.concerns.items():
        cls = section_class(concern)
        out += [
            "",
            "    @cached_property",
            f"    def {concern}(self) -> {cls}:",
            f'        """{meaning}"""',
            f"        return {cls}.from_vars(self.vars)",
        ]
    return "\n".join(out) + "\n"


def write_sections(check: bool = False) -> bool:
    """Write lookahead/settings_sections.py (or, with ``check``, say whether it is current)."""
    text = sections_source()
    current = SECTIONS_PATH.read_text(encoding="utf-8") if SECTIONS_PATH.exists() else ""
    if check:
        return current == text
    SECTIONS_PATH.write_text(text, encoding="utf-8")
    return True


def database_path(study_name: str, root: Path = PROJECT_ROOT) -> Path:
    """A study's DuckDB file: outputs/<study_name>.duckdb, or $LOOKAHEAD_DUCKDB (tests, benchmarks)."""
    env = os.environ.get("LOOKAHEAD_DUCKDB")
    return Path(env) if env else root / "outputs" / f"{study_name}.duckdb"


# --- dbt -------------------------------------------------------------------------------

#: The environment variable through which `lookahead build/run` hands dbt the study: the
#: path of a JSON file of its resolved settings (the study file plus the command's
#: overrides). Not `--vars`: dbt re-parses the whole project whenever --vars change, so a
#: second or an edited study would cost a full parse (docs/CONTRACTS.md, "How a study
#: reaches dbt"). dbt's parser never sees it: only the project's DuckDB plugin reads it.
STUDY_SETTINGS_ENV = "LOOKAHEAD_STUDY_SETTINGS"


def dbt_study(cli_vars: Mapping[str, Any]) -> Study:
    """The study a dbt invocation builds, fully checked: its `--vars` when given (`dbt build
    --vars "$(cat study.yml)"`, as documented), else the settings file $LOOKAHEAD_STUDY_SETTINGS
    names (how the lookahead command passes a study), else the default study (plain `dbt
    build`)."""
    settings_file = os.environ.get(STUDY_SETTINGS_ENV)
    if cli_vars or not settings_file:
        return study_from_dbt_vars(json.dumps(dict(cli_vars), default=str) if cli_vars else "")
    return settings_file_study(settings_file, f"${STUDY_SETTINGS_ENV}")


def settings_file_study(settings_file: str | os.PathLike[str], where: str) -> Study:
    """The study in a resolved settings file (JSON of every setting, the study file plus
    the command's overrides, relative paths relative to the project root), as the
    lookahead command writes it once per command for dbt ($LOOKAHEAD_STUDY_SETTINGS) and
    the LLM jobs (--settings). ``where`` names the setting or flag in the message when
    the file is missing. Decoded by :meth:`Study.from_json`: nothing is read again."""
    try:
        text = Path(settings_file).read_text(encoding="utf-8")
    except OSError:
        raise StudyConfigError(f"{where}: no study settings file '{settings_file}'") from None
    try:
        return Study.from_json(text)
    except json.JSONDecodeError as exc:
        raise StudyConfigError(f"{where}: '{settings_file}' is not a JSON settings file (line {exc.lineno})") from None


#: The database a dbt invocation whose study_name is refused opens (outputs/<this>.duckdb):
#: its run-start check stops it, and its build log stays out of every real study's.
REFUSED_STUDY_NAME = "refused_study_name"


def dbt_study_name(cli_vars: Mapping[str, Any]) -> str:
    """The name of the study a dbt invocation builds, hence its database
    (:func:`database_path`). Read even when a setting is bad: the build's log and the
    database still name the study, and the run-start check names the setting in one line
    (:func:`check_dbt_vars`)."""
    try:
        return dbt_study(cli_vars).name
    except StudyConfigError:
        name = str(cli_vars.get("study_name") or read_study_file(default_study_path())["study_name"])
    try:  # a name that is not one path segment names no file: the check refuses it first
        return untrusted.check_study_name(name)
    except StudyConfigError:
        return REFUSED_STUDY_NAME


def check_dbt_vars(dbt_values_json: str, cli_vars: str) -> str:
    """dbt's run-start check (through the DuckDB plugin): '' or one line naming the setting.

    ``dbt_values_json`` holds every declared setting as dbt resolved it (null where
    neither dbt's vars block nor --vars has it: the block carries only the settings dbt
    reads); ``cli_vars`` is the `--vars` text as given. The vars must be a valid study by
    :func:`resolve`, and dbt's values must equal ours (they differ only when dbt_project.yml was edited by
    hand instead of regenerated).

    Without `--vars`, when the lookahead command hands dbt its study in
    $LOOKAHEAD_STUDY_SETTINGS, the check is that file's study (:func:`dbt_study`, the
    decode the plugin and the models share). dbt's vars are then not this build's study
    (every model reads the study through the plugin), so they are not compared, and the
    default study file is not read: a plain `dbt build` and `generated_files.py
    --check-dbt-vars` (make lint) catch a hand-edited vars block."""
    try:
        given, flat = _cli_study(cli_vars)
        if not given and os.environ.get(STUDY_SETTINGS_ENV):
            dbt_study({})
            return ""
        ours = study_from_dbt_vars(cli_vars).vars
        inherited = set(flat) - set(given)  # from the file --vars extends: dbt's var() never saw them
        theirs = json.loads(dbt_values_json)
        for name, value in ours.items():
            got = theirs.get(name)
            spec = SCHEMA.settings[name]
            if got is None and not spec.dbt:  # not among dbt's vars (it reads no var() of it)
                continue
            if name in inherited:
                continue
            if got is not None and spec.type == "date":
                got = parse_date(got, name).isoformat()
            if got is not None and spec.type == "column_map":
                got = _check_column_map(got)
            if got is not None and spec.type == "number":
                got = float(got)
            if got != value:
                return (
                    f"setting '{name}': dbt has {got!r} where the study has {value!r}; "
                    "regenerate dbt_project.yml's vars (python scripts/generated_files.py --write-dbt-vars)"
                )
    except StudyConfigError as exc:
        return str(exc)
    return ""


class _VarsDumper(yaml.SafeDumper):
    """Multi-line prompts as literal blocks, mappings and lists on one line."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _flow(dumper: yaml.SafeDumper, value: Any) -> yaml.Node:
    if isinstance(value, dict):
        return dumper.represent_mapping("tag:yaml.org,2002:map", value.items(), flow_style=True)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True)


_VarsDumper.add_representer(str, _str_representer)


def _cli_study(cli_vars: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A dbt invocation's `--vars` text as given, and as a study (its ``extends:`` chain
    flattened by the loader of study files, flatten_study)."""
    given = untrusted.load_yaml(cli_vars, "--vars") if cli_vars else {}
    if isinstance(given, str):
        given = untrusted.load_yaml(given, "--vars")
    given = given or {}
    if not isinstance(given, dict):
        raise StudyConfigError("--vars must be a YAML mapping of settings")
    return given, flatten_study(given)


def study_from_dbt_vars(cli_vars: str) -> Study:
    """The study a dbt invocation builds: its `--vars` text, resolved as check_dbt_vars does
    (a study that `extends:` another is flattened first, as a study file is)."""
    explicit = _cli_study(cli_vars)[1]
    defines_study = any(SCHEMA.settings[k].identifies for k in explicit if k in SCHEMA.settings)
    base = None if defines_study else resolve(read_study_file(default_study_path()))
    return Study(vars=resolve(explicit, base=base))


def dbt_vars_block(root: Path = PROJECT_ROOT) -> str:
    """The generated `vars:` block of dbt_project.yml: the default study's values of the
    settings dbt SQL and Jinja read with var() (marked `dbt: true` in the declaration).
    Every other setting reaches the models through the study_settings model (the whole
    study, resolved from --vars by the plugin), so dbt's vars carry only what dbt reads;
    `dbt build --vars "$(cat study.yml)"` still takes a whole study file."""
    values = resolve(read_study_file(default_study_path(root)))
    lines = [
        "vars:",
        f"  # GENERATED from lookahead/study_settings.yml and {SCHEMA.default_study} (the",
        "  # default study): the settings dbt reads with var(); do not edit here:",
        "  # python scripts/generated_files.py --write-dbt-vars",
    ]
    for name, spec in SCHEMA.settings.items():
        if not spec.dbt:
            continue
        value = values[name]
        if isinstance(value, (dict, list)):
            dumped = (
                f"{name}: "
                + yaml.dump(
                    value, Dumper=_VarsDumper, default_flow_style=True, sort_keys=False, width=10_000, allow_unicode=True
                ).strip()
            )
        else:
            dumped = yaml.dump(
                {name: value}, Dumper=_VarsDumper, default_flow_style=False, sort_keys=False, width=10_000, allow_unicode=True
            ).rstrip("\n")
        if any(mark in dumped for mark in ("{{", "{%", "{#")):  # dbt's var() renders a string as Jinja
            raise StudyConfigError(
                f"setting '{name}': the default study's value holds Jinja ({{{{, {{% or "
                "{#), which dbt_project.yml's vars would run; write it without"
            )
        lines.append(f"  # {spec.meaning}")
        lines += ["  " + ln for ln in dumped.splitlines()]
    return "\n".join(lines) + "\n"


VARS_BEGIN = "# --- study settings (generated) ---"
VARS_END = "# --- end of study settings ---"


def write_dbt_vars(root: Path = PROJECT_ROOT, check: bool = False) -> bool:
    """Rewrite (or, with check, compare) dbt_project.yml's vars."""
    path = root / "dbt_project.yml"
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(VARS_BEGIN + "\n", 1)
    _, tail = rest.split(VARS_END + "\n", 1)
    new = head + VARS_BEGIN + "\n" + dbt_vars_block(root) + VARS_END + "\n" + tail
    if check:
        return new == text
    path.write_text(new, encoding="utf-8")
    return True
