"""Check that `make demo` printed the lines the README says it ends with.

    python scripts/check_demo_output.py demo.log [README.md]

The README quotes, in the fenced block after the line that says "`make demo` ends with",
the lines a fresh `make demo` prints last (the three verdicts, the cutoff check's
conclusion, the claim-level conclusions). CI (.ci/run) keeps the demo's output and runs
this script on it, so the README's quotation is tested against a real fresh run: every
quoted line must appear in the log, in the README's order (other lines may come between
them). Exit 0 when they do; else 1, naming the first quoted line not found.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MARKER = "`make demo` ends with"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def quoted_lines(readme: str) -> list[str]:
    """The lines of the first fenced block after MARKER."""
    after = readme[readme.index(MARKER) :]
    block = re.search(r"```[a-z]*\n(.*?)```", after, re.S)
    if block is None:
        raise ValueError(f"no fenced block after {MARKER!r}")
    return [line.rstrip() for line in block.group(1).splitlines() if line.strip()]


def missing(quoted: list[str], log: str) -> str | None:
    """The first quoted line not found in the log in order (None when all are)."""
    lines = [_ANSI.sub("", line).rstrip() for line in log.splitlines()]
    at = 0
    for want in quoted:
        while at < len(lines) and lines[at] != want:
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def main(argv: list[str]) -> int:
    log = Path(argv[0]).read_text(encoding="utf-8", errors="replace")
    readme = Path(argv[1] if len(argv) > 1 else "README.md").read_text(encoding="utf-8")
    quoted = quoted_lines(readme)
    gone = missing(quoted, log)
    if gone is not None:
        print(
            f"error: the README says `make demo` prints {gone!r}, and this run did not (in the README's order)", file=sys.stderr
        )
        return 1
    print(f"README: the {len(quoted)} lines it quotes from `make demo` were printed, in order")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
