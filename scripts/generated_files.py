"""Regenerate, or check, the files generated from the package's declarations.

Usage (from the repository root):
  .venv/bin/python scripts/generated_files.py --check-dbt-vars      (make lint, the pre-commit hook)
  .venv/bin/python scripts/generated_files.py --write-dbt-vars      dbt_project.yml's vars block
  .venv/bin/python scripts/generated_files.py --write-sections      lookahead/settings_sections.py
  .venv/bin/python scripts/generated_files.py --check-sections
  .venv/bin/python scripts/generated_files.py --write-macro         macros/lap_measures.sql
  .venv/bin/python scripts/generated_files.py --check-macro
  .venv/bin/python scripts/generated_files.py --measures            the LAP measure registry, a line each

dbt_project.yml's vars and the typed sections come from lookahead/study_settings.yml and
the default study (lookahead.config.write_dbt_vars, write_sections); the macro from the
measure registry (lookahead.measures.macro_text). A --check-* flag exits 1 naming the
stale file and the flag that rewrites it; a declaration that cannot be written (Jinja in
a default value) is one line, exit 2. A study file is checked by `lookahead check --study FILE`.

Why a script: regenerating is a maintainer's step after editing a declaration, not a
command of the tool; the package holds the generators as functions (the tests hold each
generated file to them) and `lookahead` holds the commands a user types.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's package (as `python -m` from its root), whatever is installed
    sys.path.insert(0, str(ROOT))

from lookahead import measures  # noqa: E402 - after the checkout is on the path
from lookahead.config import StudyConfigError, write_dbt_vars, write_sections  # noqa: E402

SCRIPT = "python scripts/generated_files.py"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=SCRIPT, description=__doc__.splitlines()[0])
    p.add_argument("--write-dbt-vars", action="store_true", help="regenerate dbt_project.yml's vars block")
    p.add_argument("--check-dbt-vars", action="store_true", help="exit 1 if that block is out of date")
    p.add_argument("--write-sections", action="store_true", help="regenerate lookahead/settings_sections.py (the typed sections)")
    p.add_argument("--check-sections", action="store_true", help="exit 1 if that file is out of date")
    p.add_argument("--write-macro", action="store_true", help=f"regenerate {measures.MACRO_PATH.name} (the measure registry)")
    p.add_argument("--check-macro", action="store_true", help="exit 1 if that macro is out of date")
    p.add_argument("--measures", action="store_true", help="print the LAP measure registry, a line each")
    args = p.parse_args(argv)
    if not any(vars(args).values()):
        p.print_usage(sys.stderr)
        print("error: give one of the flags above (a study file: lookahead check --study FILE)", file=sys.stderr)
        return 2
    try:
        if args.write_sections:
            write_sections()
        if args.check_sections and not write_sections(check=True):
            print(f"lookahead/settings_sections.py is out of date: {SCRIPT} --write-sections", file=sys.stderr)
            return 1
        if args.write_dbt_vars:
            write_dbt_vars()
        if args.check_dbt_vars and not write_dbt_vars(check=True):
            print(f"dbt_project.yml vars are out of date: {SCRIPT} --write-dbt-vars", file=sys.stderr)
            return 1
    except StudyConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.write_macro:
        measures.MACRO_PATH.write_text(measures.macro_text(), encoding="utf-8")
        print(f"wrote {measures.MACRO_PATH}")
    if args.check_macro and measures.MACRO_PATH.read_text(encoding="utf-8") != measures.macro_text():
        print(f"{measures.MACRO_PATH.name} is out of date: {SCRIPT} --write-macro", file=sys.stderr)
        return 1
    if args.measures:
        for m in measures.MEASURES.values():
            print(f"{m.name:10s} {m.column:14s} task={m.task:10s} {m.variation:10s} {m.label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
