"""The project's layout as dbt sees it, read from dbt's own manifest (a ref added in SQL or
in a Python model is caught alike; docs/CONTRACTS.md, "Where things go").

A model's layer is the first folder under its model path (models/ for SQL, python_models/
for Python): staging, intermediate or marts. The DAG flows one way, staging ->
intermediate -> marts: the rule dbt_project_evaluator checks as
fct_staging_dependent_on_marts_or_intermediate and fct_intermediate_dependent_on_marts.
Each folder's models are documented in that folder's one `_<folder>__models.yml`, with
`data_tests:` (the `tests:` key is deprecated)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from dbt_runner import ROOT, run_dbt

LAYERS = ("staging", "intermediate", "marts")
# A model of a layer may ref only models of these layers.
ALLOWED = {"staging": {"staging"}, "intermediate": {"staging", "intermediate"}, "marts": {"staging", "intermediate", "marts"}}


def layer_of(node: dict) -> str:
    """The first folder of the model's path inside its model path (fqn: project, folders, name)."""
    folders = node["fqn"][1:-1]
    return folders[0] if folders else ""


@pytest.fixture(scope="module")
def manifest(tmp_path_factory, demo_study) -> dict:
    tmp = tmp_path_factory.mktemp("parse")
    res = run_dbt(["parse"], demo_study, tmp / "parse.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    return json.loads((tmp / "target" / "manifest.json").read_text())


def test_every_model_sits_in_a_layer_folder(manifest):
    off = sorted(
        n["original_file_path"] for n in manifest["nodes"].values() if n["resource_type"] == "model" and layer_of(n) not in LAYERS
    )
    assert not off, f"models outside staging/intermediate/marts: {off}"


def test_no_ref_runs_back_up_the_layers(manifest):
    nodes = manifest["nodes"]
    back = []
    for node in nodes.values():
        if node["resource_type"] != "model":
            continue
        for parent in node["depends_on"]["nodes"]:
            up = nodes.get(parent)
            if up is None or up["resource_type"] != "model":
                continue
            if layer_of(up) not in ALLOWED.get(layer_of(node), set(LAYERS)):
                back.append(f"{node['original_file_path']} ({layer_of(node)}) refs {up['name']} ({layer_of(up)})")
    assert not back, "back-arrows:\n" + "\n".join(sorted(back))


def test_a_models_language_matches_its_model_path(manifest):
    want = {"sql": "models", "python": "python_models"}
    off = sorted(
        n["original_file_path"]
        for n in manifest["nodes"].values()
        if n["resource_type"] == "model" and Path(n["original_file_path"]).parts[0] != want[n["language"]]
    )
    assert not off, f"SQL belongs under models/, Python under python_models/: {off}"


def test_each_folder_documents_its_models_in_one_models_yml(manifest):
    wrong = []
    for n in manifest["nodes"].values():
        if n["resource_type"] != "model":
            continue
        folder = Path(n["original_file_path"]).parent
        want = f"{folder}/_{folder.name}__models.yml"
        documented = (n.get("patch_path") or "").split("://", 1)[-1]
        if documented != want:
            wrong.append(f"{n['name']}: documented in {documented or 'no YAML'}, not {want}")
    assert not wrong, "\n".join(sorted(wrong))


def test_yaml_declares_data_tests_not_the_deprecated_tests_key():
    def keys(node, path=""):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from [f"{path}/{k}"] if k == "tests" else []
                yield from keys(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from keys(v, f"{path}[{i}]")

    found = [
        f"{f.relative_to(ROOT)}: {k}"
        for top in ("models", "python_models", "seeds", "tests/dbt", "macros")
        for f in sorted((ROOT / top).rglob("*.yml"))
        for k in keys(yaml.safe_load(f.read_text()))
    ]
    assert not found, found


def test_column_rules_are_one_named_test_per_model(manifest):
    """A model's column checks are its one `column_rules` test (macros/generic_tests.sql),
    named `column_rules_<model>`, so a build prints one node per model under the model's
    name; dbt's one-column not_null, unique and accepted_values stay only where a `where`
    limits them, or on the gates, whose four models share one column list (a YAML anchor)."""
    wrong = []
    per_model: dict[str, int] = {}
    for n in manifest["nodes"].values():
        if n["resource_type"] != "test" or not n.get("test_metadata"):
            continue
        kind, model = n["test_metadata"]["name"], str(n.get("attached_node") or "").rsplit(".", 1)[-1]
        if kind == "column_rules":
            per_model[model] = per_model.get(model, 0) + 1
            if n["name"] != f"column_rules_{model}":
                wrong.append(f"{n['name']}: not column_rules_{model}")
        elif (
            kind in ("not_null", "unique", "accepted_values", "accepted_range")
            and not n["config"].get("where")
            and not model.startswith("gate_")
        ):
            wrong.append(f"{model}.{n.get('column_name')}: {kind} outside the model's column_rules")
    wrong += [f"{m}: {k} column_rules tests" for m, k in per_model.items() if k > 1]
    assert per_model and not wrong, "\n".join(sorted(wrong))


def test_contracts_layout_table_lists_each_folders_models(manifest):
    """docs/CONTRACTS.md's layout table names every model in its folder's row, and no other."""
    rows = {}
    for line in (ROOT / "docs" / "CONTRACTS.md").read_text().splitlines():
        m = re.match(r"\| `((?:python_)?models/[a-z/]+)/`[^|]*\| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", m.group(2))))
    built = {}
    for n in manifest["nodes"].values():
        if n["resource_type"] == "model":
            built.setdefault(str(Path(n["original_file_path"]).parent), set()).add(n["name"])
    assert rows == built
