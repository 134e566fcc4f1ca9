"""Rebuild the shipped demo from its seeds (data, truth, study files, the tiny models).

Each builder trains its tiny models in a few CPU minutes; --data-only skips the training.

Usage (from the repository root):
  .venv/bin/python scripts/build_demo.py protocol --out demo [--data-only] [--check]
  .venv/bin/python scripts/build_demo.py claims --out demo/claims [--data-only]
  .venv/bin/python scripts/build_demo.py claim-kinds --out demo/claims [--data-only]
  .venv/bin/python scripts/build_demo.py check --demo demo

``protocol`` is the lookahead-bias demo (lookahead.demo.build), ``claims`` the claim-level
demo (lookahead.claims.demo), ``claim-kinds`` its regression and ranking variants
(lookahead.claims.demo_kinds), ``check`` the trained protocol models against the planted
truth without the pipeline (lookahead.demo.check). Each builder's options: ``... BUILDER
--help``.

Why a script: rebuilding the demo is a maintainer's step, not a command of the tool; the
package holds the builders as functions (the tests call them) and `lookahead` holds the
commands a user types.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from lookahead.claims import demo as claims_demo
from lookahead.claims import demo_kinds
from lookahead.demo import build, check

#: builder -> (what it writes, its entry point on the arguments after it)
BUILDERS: dict[str, tuple[str, Callable[[list[str]], object]]] = {
    "protocol": ("the lookahead-bias demo: data, truth, both models, study files", build.main),
    "claims": ("the claim-level demo: planted claims, corpus, both claim models, study files", claims_demo.main),
    "claim-kinds": ("the regression and ranking claim demos", demo_kinds.main),
    "check": ("the trained protocol models against the planted truth, without the pipeline", check.main),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="scripts/build_demo.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="builder", required=True)
    for name, (help_, _) in BUILDERS.items():
        sub.add_parser(name, help=help_, add_help=False)
    name = p.parse_args(argv[:1]).builder
    code = BUILDERS[name][1](argv[1:])
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
