"""What a study file may hold: the bounds and character rules for values that come from
someone else's file (docs/SECURITY.md).

A study file is often written by someone other than the person who runs it (a
colleague's pull request that CI builds, a study shared with a paper), so its values are
data, bounded before anything reads them:

- the file itself: at most :data:`MAX_STUDY_FILE_BYTES`, and YAML aliases may not expand
  it past :data:`MAX_YAML_NODES` values (an "alias bomb" of a few lines would otherwise
  expand to billions when the settings are written as JSON for dbt);
- ``study_name`` is one path segment (:func:`check_study_name`): the database, results,
  stale and temporary files derived from it stay in the folders the study names;
- a one-line setting (a name, a path, a model id) holds no control character and at most
  :data:`MAX_LINE_CHARS` characters; a path holds no double quote (the Stata do-file
  carries two of them) and no backslash (DuckDB's file patterns cannot match one; the
  tool runs on POSIX systems, whose folders are written with '/'); a prompt may span lines but holds no NUL and at most
  :data:`MAX_TEXT_CHARS` characters;
- a column name (column_map, extra_columns, moderator_column) reaches SQL only as a quoted identifier
  (macros/study_helpers.sql, sql_identifier), and holds no control character;
- a mapping whose keys are declared (``keys`` in lookahead/study_settings.yml) takes no
  other key: its keys become column names (stg_recall_responses).

The loader (lookahead/config.py) applies :func:`check_value` to every setting after its
type check, so every caller (the jobs, dbt's run-start check, the report) gets the same
refusal, one line naming the setting, before anything is written."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Protocol

import yaml

from lookahead.errors import StudyConfigError


class DeclaredSetting(Protocol):
    """What the checks read of a declared setting (lookahead.config.SettingSpec), read-only
    as a frozen SettingSpec is."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def keys(self) -> tuple[str, ...]: ...


#: A study file larger than this is refused before it is parsed (study files are a few KB).
MAX_STUDY_FILE_BYTES = 1_000_000
#: The values (mappings, lists, scalars) a study file may expand to through YAML aliases.
MAX_YAML_NODES = 100_000
#: study_name: one path segment of at most this many characters.
MAX_NAME_CHARS = 100
#: A one-line setting (string, path, column name, list item, mapping key or value).
MAX_LINE_CHARS = 4_096
#: A multi-line setting (type text: the prompts).
MAX_TEXT_CHARS = 100_000

#: study_name: letters, digits and underscore (any script), then also '.', '-' and space.
_NAME = re.compile(r"^\w[\w.\- ]*$")
#: Characters a multi-line text may hold among the control characters.
_TEXT_CONTROLS = frozenset("\n\r\t")


def _control(text: str, allowed: frozenset[str] = frozenset()) -> str | None:
    """The first control character of ``text`` (Unicode category Cc, or a line or
    paragraph separator) not in ``allowed``, or None."""
    for ch in text:
        if ch not in allowed and (unicodedata.category(ch) == "Cc" or ch in "\u2028\u2029"):
            return ch
    return None


def check_text(setting: str, value: str, multi_line: bool = False, path: bool = False) -> str:
    """``value`` if a setting may hold it, else StudyConfigError naming ``setting``."""
    limit = MAX_TEXT_CHARS if multi_line else MAX_LINE_CHARS
    if len(value) > limit:
        raise StudyConfigError(
            f"setting '{setting}': {len(value):,} characters, more than the {limit:,} a study setting may hold (docs/SECURITY.md)"
        )
    bad = _control(value, _TEXT_CONTROLS if multi_line else frozenset())
    if bad is not None:
        raise StudyConfigError(
            f"setting '{setting}': holds the control character {bad!r}" + ("" if multi_line else "; write it on one line")
        )
    if path and ('"' in value or "\\" in value):
        raise StudyConfigError(f"setting '{setting}': a path may not hold a double quote or a backslash (write folders with '/')")
    return value


def check_study_name(value: str) -> str:
    """The study's name if it is one path segment, else one line saying why.

    Why so strict: the name becomes file and folder names (outputs/<name>.duckdb,
    results/<name>/, their stale and temporary files) and text in the Stata do-file, so a
    '/', '..' or a quote would put files outside the study's folders or code into the
    do-file."""
    check_text("study_name", value)
    if len(value) > MAX_NAME_CHARS:
        raise StudyConfigError(f"setting 'study_name': {len(value)} characters, more than {MAX_NAME_CHARS}")
    if ".." in value or not _NAME.match(value) or value != value.strip():
        raise StudyConfigError(
            f"setting 'study_name': {value!r} is not a name: use letters, digits, "
            "'_', '-', '.' and spaces (it names files and folders, so no '/', '\\', "
            "'..' or quotes)"
        )
    return value


def _check_strings(setting: str, value: Any) -> None:
    """Every string inside a list or mapping setting (keys too) on one line, bounded."""
    if isinstance(value, str):
        check_text(setting, value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_strings(f"{setting}.{k}" if isinstance(k, str) and _control(k) is None else setting, k)
            _check_strings(f"{setting}.{k}", v)
    elif isinstance(value, list):
        for v in value:
            _check_strings(setting, v)


def check_value(spec: DeclaredSetting, value: Any) -> Any:
    """A typed setting value (the loader's type check passed) checked against the rules
    above; returned unchanged."""
    name = spec.name
    if value is None:
        return value
    if name == "study_name":
        return check_study_name(value)
    if isinstance(value, str):
        return check_text(name, value, multi_line=spec.type == "text", path=spec.type == "path")
    if spec.type == "mapping" and spec.keys and isinstance(value, dict):
        extra = [k for k in value if k not in spec.keys]
        if extra:
            raise StudyConfigError(f"setting '{name}': {str(extra[0])!r} is not one of its keys ({', '.join(spec.keys)})")
    _check_strings(name, value)
    return value


def load_yaml(text: str, where: str) -> Any:
    """A study file's YAML, refused when its aliases expand it past MAX_YAML_NODES values.

    PyYAML shares an aliased value instead of copying it, so the bomb costs nothing until
    something walks it (the JSON the settings are written as, a hash); the walk here
    stops at the bound, so its cost is bounded too. A tag the safe loader does not build
    (``!!python/object``, ``!!binary``-like custom tags) is named as an unsupported tag:
    the text is valid YAML, and calling it invalid sent users looking for a syntax error."""
    try:
        data = yaml.safe_load(text)
    except yaml.constructor.ConstructorError as exc:
        tag = unsupported_tag(exc)
        if tag is None:
            raise
        mark = exc.problem_mark
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise StudyConfigError(
            f"{where} uses the YAML tag '{tag}'{at}, which is not supported: settings are "
            "plain text, numbers, true/false, lists and mappings"
        ) from None
    seen = 0
    stack = [data]
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_YAML_NODES:
            raise StudyConfigError(
                f"{where} expands to more than {MAX_YAML_NODES:,} values (YAML aliases); write the settings out"
            )
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return data


def unsupported_tag(exc: yaml.constructor.ConstructorError) -> str | None:
    """The tag, as written (``!!python/object:os.system``), of a ConstructorError raised
    because the safe loader has no constructor for it; None for any other error."""
    problem = str(exc.problem or "")
    if "constructor for the tag" not in problem:
        return None
    tag = problem.split("tag", 1)[1].strip().strip("'\"")
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def check_file_size(size: int, where: str) -> None:
    """A study file over MAX_STUDY_FILE_BYTES is refused before it is read."""
    if size > MAX_STUDY_FILE_BYTES:
        raise StudyConfigError(
            f"{where} is {size:,} bytes, more than the {MAX_STUDY_FILE_BYTES:,} a study file may hold (docs/SECURITY.md)"
        )
