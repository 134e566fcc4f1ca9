"""The SQL scoring rules that reach the regressions against their Python oracle.

P(label) (stg_recall_responses) and Min-K% (stg_mink_scores) are computed in SQL; the
Python functions in lookahead.scoring state the same rules in their plainest form. A
generated corpus of edge cases (whitespace of every kind Python strips, case, near
misses, duplicate token ids with different log-probs, null ids, tokens and log-probs,
NaN, infinities, positive log-probs, sampling-fallback lines) is scored by both; they
must agree to 1e-12, and the count of invalid log-probs the gates use must agree too."""

from __future__ import annotations

import json
import math
import re

import duckdb
import numpy as np
import pytest
from dbt_runner import ROOT, run_dbt

from lookahead.scoring import label_probability, mink_lap, sample_frequency

N_RECALL = 1200
N_MINK = 1200
MINK_K = 0.3
LABELS = {"up": "Up ", "down": "down", "unknown": "unknown"}  # a label with a stray space and case
PY_SPACE = [chr(i) for i in range(0x110000) if chr(i).isspace()]
TRICKY = ["\u200b", "\u0130", "\u212a", "\u00df", "\ufeff", ".", "-", "_"]  # not whitespace to Python
WORDS = [
    "up",
    "down",
    "unknown",
    "upward",
    "u p",
    "downs",
    "unknow",
    "UNKNOWN",
    "Up",
    "uP",
    "DOWN",
    "\u0130",
    "i",
    "k",
    "\u212a",
    "",
    " ",
]


def _token(rng: np.random.Generator) -> str | None:
    if rng.random() < 0.03:
        return None
    word = WORDS[rng.integers(len(WORDS))]
    if rng.random() < 0.5:
        word = "".join(rng.choice(PY_SPACE, size=rng.integers(1, 4))) + word
    if rng.random() < 0.5:
        word = word + "".join(rng.choice(PY_SPACE, size=rng.integers(1, 4)))
    if rng.random() < 0.08:
        word = TRICKY[rng.integers(len(TRICKY))] + word
    return word


def _logprob(rng: np.random.Generator, p_odd: float = 0.04) -> float | None:
    u = rng.random()
    if u < p_odd:
        return [math.nan, math.inf, -math.inf, 5.0, 0.0, -0.0, None, 1e-300][rng.integers(8)]
    return float(-rng.exponential(2.0))


def recall_corpus(seed: int = 11) -> list[dict]:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(N_RECALL):
        line = {
            "key": f"r{i}",
            "task": "recall",
            "model_id": "oracle",
            "backend": "fixture",
            "entity_id": "E1",
            "target_date": "2021-01-05",
            "prompt": "p",
            "params": {},
            "approximated": False,
            "finished_at": "2026-01-01T00:00:00Z",
        }
        if i % 25 == 0:  # sampling fallback
            line.update(
                approximated=True, top_logprobs=None, samples=[_token(rng) or "up" for _ in range(int(rng.integers(25, 40)))]
            )
        else:
            n = int(rng.integers(0, 25))
            ids = rng.integers(0, 12, size=n)  # small pool: repeated ids with other log-probs
            line["top_logprobs"] = [
                {"token_id": None if rng.random() < 0.1 else int(t), "token": _token(rng), "logprob": _logprob(rng)} for t in ids
            ]
        lines.append(line)
    return lines


def mink_corpus(seed: int = 12) -> list[dict]:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(N_MINK):
        n = int(rng.integers(1, 60))
        first = None if rng.random() < 0.8 else float(-rng.exponential())
        lps = [first] + [_logprob(rng, p_odd=0.01) for _ in range(n - 1)]
        lines.append(
            {
                "key": f"m{i}",
                "task": "mink",
                "model_id": "oracle",
                "backend": "fixture",
                "row_id": f"row{i}",
                "prompt": "p",
                "params": {},
                "approximated": False,
                "prompt_logprobs": [{"token_id": j, "token": f"t{j}", "logprob": lp} for j, lp in enumerate(lps)],
                "finished_at": "2026-01-01T00:00:00Z",
            }
        )
    return lines


def _invalid(lp: float | None) -> bool:
    return lp is not None and (math.isnan(lp) or math.isinf(lp) or lp > 0)


def _same(sql_value, py_value) -> bool:
    """Equal to 1e-12; NULL only where Python gives None; NaN and infinities alike."""
    if py_value is None or sql_value is None:
        return py_value is None and sql_value is None
    if math.isnan(py_value):
        return sql_value is not None and math.isnan(sql_value)
    if math.isinf(py_value):
        return sql_value == py_value
    return sql_value is not None and abs(sql_value - py_value) <= 1e-12


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("oracle")
    raw = root / "raw"
    raw.mkdir()
    recall, mink = recall_corpus(), mink_corpus()
    for name, lines in (("recall", recall), ("mink", mink), ("forecast", [])):
        with open(raw / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(line) + "\n" for line in lines)  # NaN/Infinity as JSON allows
    from lookahead.config import default_study_path, read_study_file

    vars_ = {
        **read_study_file(default_study_path()),  # the demo study's text, this cache
        "raw_dir": str(raw),
        "recall_labels": LABELS,
        "mink_k": MINK_K,
        "model_id": "oracle",
    }
    res = run_dbt(["run", "--select", "stg_recall_responses", "stg_mink_scores"], vars_, root / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    return recall, mink, res


def _rows(res, table: str) -> dict[str, dict]:
    """Rows by key with SQL NULL as None and NaN as NaN (a DataFrame would merge them)."""
    con = duckdb.connect(str(res.db), read_only=True)
    try:
        cur = con.execute(f"select * from {table}")
        names = [d[0] for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=False)) for r in cur.fetchall()}
    finally:
        con.close()


def test_corpus_is_large_and_has_every_edge_case():
    recall = recall_corpus()
    entries = [t for line in recall for t in (line.get("top_logprobs") or [])]
    assert len(recall) >= 1000 and len(mink_corpus()) >= 1000
    tokens = [t["token"] for t in entries if t["token"]]
    for ch in ("\t", "\n", "\u00a0", "\u3000", "\x1c"):
        assert any(ch in tok for tok in tokens)
    assert any(t["token_id"] is None for t in entries)
    assert any(t["logprob"] is not None and math.isnan(t["logprob"]) for t in entries)
    by_line_dupes = sum(
        1
        for line in recall
        if line.get("top_logprobs") and len({t["token_id"] for t in line["top_logprobs"]}) < len(line["top_logprobs"])
    )
    assert by_line_dupes > 500


def test_sql_whitespace_list_is_pythons():
    import jinja2

    text = (ROOT / "macros" / "study_helpers.sql").read_text()
    line = re.search(r"\{%- set ws = .*? -%\}", text).group(0)
    rendered = jinja2.Template(line + "{{ ws }}").render()
    assert sorted(rendered) == sorted(PY_SPACE)


def test_sql_p_label_equals_the_python_rule(scored):
    recall, _, res = scored
    sql = _rows(res, "stg_recall_responses")
    checked = 0
    for line in recall:
        row = sql[line["key"]]
        for name, label in LABELS.items():
            if line["approximated"]:
                py = sample_frequency(line["samples"], label)
            else:
                py = label_probability(line["top_logprobs"], label)
            censored = bool(row[f"{name}_censored"])
            assert censored == (py is None), (line["key"], name)
            if py is not None:
                assert _same(row[f"p_{name}"], py), (line["key"], name, row[f"p_{name}"], py)
            checked += 1
        if not line["approximated"]:
            expect = sum(_invalid(t["logprob"]) for t in line["top_logprobs"])
            assert int(row["n_invalid_logprobs"]) == expect, line["key"]
    assert checked == 3 * N_RECALL


def test_sql_mink_equals_the_python_rule(scored):
    _, mink, res = scored
    sql = _rows(res, "stg_mink_scores")
    n_scored = 0
    for line in mink:
        lps = [t["logprob"] for t in line["prompt_logprobs"]]
        row = sql[line["key"]]
        for mean in ("geometric", "arithmetic"):
            py = mink_lap(lps, MINK_K, mean)
            got = row[f"lap_mink_{mean}"]
            assert _same(got, py), (line["key"], mean, got, py)
            n_scored += py is not None
        after = lps[1:]
        assert int(row["n_invalid_logprobs"]) == sum(lp is None or _invalid(lp) for lp in after)
    assert n_scored > 1000
