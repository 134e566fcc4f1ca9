"""The import graph of the package and the jobs, read from their source (AST, nothing
imported): no cycle anywhere, the package never imports the jobs, and no import runs up a
layer (docs/CONTRACTS.md, "The package by layer").

Every import counts, including one inside a function: a lazy import hides a cycle from
the interpreter at start-up, not from a reader or a refactoring (docs/CONTRACTS.md,
"Layout")."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

from dbt_runner import ROOT

PACKAGES = ("lookahead", "llm_jobs")
CONTRACTS = ROOT / "docs" / "CONTRACTS.md"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = ROOT, nested: bool = True) -> dict[str, set[str]]:
    """module -> the project modules it imports (``from a import b`` counts as ``a.b`` when
    ``a.b`` is a module, else as ``a``). `nested` False reads only the statements at the top
    of each file: the blind spot the checks must not have (test_a_lazy_upward_import_is_found)."""
    files = {module_name(p, root): p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree) if nested else tree.body:
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for t in targets:
                while t and t not in files:  # `import a.b.c` of a non-module attribute
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    g = import_graph()
    assert "llm_jobs.forecast" in g and "lookahead.config" in g["llm_jobs.forecast"] | {
        d for m in g["llm_jobs.forecast"] for d in g[m]
    }


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_package_never_imports_the_jobs():
    up = sorted(
        f"{m} imports {t}"
        for m, ts in import_graph().items()
        if m.startswith("lookahead")
        for t in ts
        if t.startswith("llm_jobs")
    )
    assert not up, "\n".join(up)


#: The job process `lookahead jobs` and `lookahead run` start (lookahead.children.run_jobs).
JOB_PROCESS = "llm_jobs.run_all"


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = {start}, [start]
    while todo:
        for t in graph[todo.pop()] - seen:
            seen.add(t)
            todo.append(t)
    return seen


def unseen_jobs(graph: dict[str, set[str]], modules: set[str]) -> list[str]:
    """The job modules the job process does not import: a job named by a string (a module
    name handed to a subprocess) is one of them."""
    seen = reachable(graph, JOB_PROCESS)
    return sorted(m for m in modules if m not in seen)


def test_the_graph_sees_every_job():
    """Every entry of the job registry (llm_jobs.registry), protocol and claim alike, is a
    module the job process imports, and that process is the one the command starts."""
    import inspect

    from llm_jobs.registry import JOBS
    from lookahead.children import run_jobs

    modules = {e.module for e in JOBS}
    assert {"llm_jobs.fused", "llm_jobs.forecast", "llm_jobs.claims_rationale", "llm_jobs.claims_repredict"} <= modules
    assert not unseen_jobs(import_graph(), modules)
    assert inspect.signature(run_jobs).parameters["module"].default == JOB_PROCESS


def test_a_job_the_process_does_not_import_is_unseen():
    """The check can fail: the registry's import of one job taken out of the graph (as when
    it named the job by a module string) leaves that job unseen."""
    graph = {m: set(ts) for m, ts in import_graph().items()}
    graph["llm_jobs.registry"].discard("llm_jobs.claims_value")
    assert unseen_jobs(graph, {"llm_jobs.claims_value", "llm_jobs.forecast"}) == ["llm_jobs.claims_value"]


def test_a_cycle_is_found():
    """The detector itself: a planted two-module cycle and a self-contained chain."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# ---------------------------------------------------------------- layers


def layer_table(text: str | None = None) -> dict[str, tuple[int, str]]:
    """module name -> (layer number, layer name), read from docs/CONTRACTS.md's table
    "The package by layer" (its rows: ``| 3 pages | `lookahead.pages` | ... |``)."""
    out: dict[str, tuple[int, str]] = {}
    for line in (CONTRACTS.read_text(encoding="utf-8") if text is None else text).splitlines():
        m = re.match(r"\| (\d) ([a-z]+) \| ([^|]+) \|", line)
        if m:
            for name in re.findall(r"`([a-z_.]+)`", m.group(3)):
                out[name] = (int(m.group(1)), m.group(2))
    return out


def layer_of(module: str, table: dict[str, tuple[int, str]]) -> tuple[int, str] | None:
    """The layer of the longest name in the table that covers the module (None: no layer)."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        hit = table.get(".".join(parts[:i]))
        if hit:
            return hit
    return None


def upward_arrows(graph: dict[str, set[str]], table: dict[str, tuple[int, str]]) -> list[str]:
    """Every import of a module from a higher layer, in one line each."""
    out = []
    for mod, targets in graph.items():
        low = layer_of(mod, table)
        for t in targets:
            high = layer_of(t, table)
            if low and high and high[0] > low[0]:
                out.append(f"{mod} ({low[1]}) imports {t} ({high[1]})")
    return sorted(out)


def test_the_layer_table_is_read_and_names_real_modules():
    table = layer_table()
    assert set(table.values()) == {(4, "commands"), (3, "pages"), (2, "analysis"), (1, "foundation")}
    assert table["lookahead.pages"] == (3, "pages") and table["lookahead"] == (1, "foundation")
    graph = import_graph()
    stale = sorted(n for n in table if n not in graph)  # a name for a module that is gone
    assert not stale, stale
    assert all(layer_of(m, table) for m in graph)


def test_no_import_runs_up_a_layer():
    up = upward_arrows(import_graph(), layer_table())
    assert not up, "imports that run up a layer (docs/CONTRACTS.md, 'The package by layer'):\n" + "\n".join(up)


def test_the_report_is_one_package():
    """What a reader sees lives in lookahead.pages: no report module outside it."""
    graph = import_graph()
    for gone in (
        "lookahead.report",
        "lookahead.compare",
        "lookahead.cutoff_report",
        "lookahead.paper.report_section",
        "lookahead.claims.report_section",
    ):
        assert gone not in graph, gone
    for there in ("lookahead.pages.report", "lookahead.pages.compare", "lookahead.pages.cutoff", "lookahead.pages.paper"):
        assert there in graph, there


def test_a_lazy_upward_import_is_found(tmp_path):
    """The check can fail: a copy of the tree with one planted module in the analysis
    layer that imports the pages inside a function (the arrow lookahead.paper.report_section
    once drew) is reported, in one line; reading only the top of each file would miss it."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (tmp_path / "lookahead" / "paper" / "planted.py").write_text(
        '"""A planted module."""\n\n\ndef section():\n    from lookahead.pages.sections import raw_section\n\n'
        "    return raw_section\n",
        encoding="utf-8",
    )
    table = layer_table()
    assert upward_arrows(import_graph(tmp_path), table) == [
        "lookahead.paper.planted (analysis) imports lookahead.pages.sections (pages)"
    ]
    assert upward_arrows(import_graph(tmp_path, nested=False), table) == []
    assert upward_arrows(import_graph(), table) == []  # the tree itself, unchanged
