"""Coalition values asked many at a time (seed 002's Claim ID Reference System, setting
``claims_coalition_batch``), over the real `openai` client and a loopback server:

* the batched prompt is the seed's Batched Shapley Prompt, written out here;
* for a server that answers a coalition the same whether asked alone or in a batch, the
  batched job writes, coalition for coalition, the raw line the one-coalition job
  writes (same key, prompt, answer text and value), and the tables' Shapley values are
  the same, for each task kind; a batch of 4 sends ceil(15 / 4) requests an instance;
* a set missing, out of range, repeated or invalid in the answer is asked again in a
  smaller batch, then recorded as a failure, never stored as a value;
* a second run, and a run switching between batched and unbatched, asks nothing;
* the combinations that cannot work are refused in one line naming the setting.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from completion_server import serve_completions
from test_claims_kinds import _job, _pred, _study

from lookahead.claims.prompts import batched_coalition_prompt
from lookahead.claims.tables import build
from lookahead.config import load_study

ITEMS = ["Ash", "Birch", "Cedar", "Elm"]
RANK_PRED = "Elm > Ash > Cedar > Birch"


def _value(kind: str, claims: list[str]):
    """The model's answer to a coalition, from the claim texts it is given: the same
    function whether the coalition is asked alone or as a SET of a batch."""
    contract = any("record contract" in c for c in claims)
    scored = any("scored" in c for c in claims)
    if kind == "classification":
        return 0.5 + 0.25 * contract - 0.125 * scored
    if kind == "regression":
        return 10_000_000 + 8_000_000 * contract + 2_000_000 * scored
    r = sorted(ITEMS)
    if contract:
        r = ["Elm", *[i for i in r if i != "Elm"]]
    if scored:
        r = [*[i for i in r if i != "Ash"], "Ash"]
    return r


def _kind_of(prompt: str) -> str:
    if "BEST to WORST" in prompt:
        return "ranking"
    return "classification" if "probability" in prompt else "regression"


def _single_answer(prompt: str) -> str:
    listed = prompt.split("CLAIMS:\n", 1)[1].split("\n\nOUTPUT:", 1)[0]
    claims = [] if listed == "(none)" else [re.sub(r"^\d+\. ", "", x) for x in listed.splitlines()]
    kind = _kind_of(prompt)
    v = _value(kind, claims)
    return " > ".join(v) if kind == "ranking" else str(v)


def _sets(prompt: str) -> tuple[list[str], list[list[int]]]:
    listed = prompt.split("CLAIMS (reference by ID):\n", 1)[1].split("\n\n", 1)[0]
    claims = [re.sub(r"^\[\d+\] ", "", x) for x in listed.splitlines()]
    sets = [json.loads(m) for m in re.findall(r"^SET \d+: (\[[\d, ]*\])$", prompt, re.MULTILINE)]
    return claims, sets


def _batch_objects(prompt: str) -> list[dict]:
    kind = _kind_of(prompt)
    field = {"classification": "p", "regression": "value", "ranking": "ranking"}[kind]
    claims, sets = _sets(prompt)
    return [{"set": j, field: _value(kind, [claims[i - 1] for i in s])} for j, s in enumerate(sets, 1)]


def answer(prompt: str) -> str:
    if "CLAIMS (reference by ID):" in prompt:
        return json.dumps(_batch_objects(prompt))
    return _single_answer(prompt)


class Server:
    def __init__(self, answer_fn=answer) -> None:
        self.prompts: list[str] = []
        self.lock = threading.Lock()

        def record(p: str) -> None:
            with self.lock:
                self.prompts.append(p)

        self.srv = serve_completions(answer_fn, record)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"


@pytest.fixture()
def server():
    s = Server()
    yield s
    s.srv.shutdown()


def _kind_study(tmp_path: Path, kind: str, url: str, batch: int, **kw) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    if kind == "ranking":
        preds = [_pred("k1", RANK_PRED, RANK_PRED), _pred("k2", RANK_PRED, RANK_PRED, 3)]
    elif kind == "regression":
        preds = [_pred("r1", "21500000", "20000000"), _pred("r2", "9000000", "8000000", 3)]
        kw.setdefault("claims_default_value", 15e6)
    else:
        preds = [_pred("c1", "up", "up"), _pred("c2", "down", "up", 3)]
    path = _study(tmp_path, kind, preds, **{"claims_coalition_prompt": "seed", **kw})
    v = yaml.safe_load(path.read_text())
    v.update(base_url=url, claims_coalition_batch=batch, concurrency=2)
    path.write_text(yaml.safe_dump(v))
    return path


def _lines(study: Path, name: str = "claims_value.jsonl") -> list[dict]:
    p = load_study(study).raw_dir / name
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


# ----------------------------------------------------------------------------- the prompt


def test_batched_prompt_is_the_seeds_claim_id_form():
    text = batched_coalition_prompt(
        "Will Omega win?", ["a fact", "another fact", "a third"], [[1, 3], [2]], "p", "the probability (from 0 to 1) of up", "0.5"
    )
    assert text == (
        "Output predictions as JSON array. No explanation.\n"
        "RULES: (1) Use ONLY provided claims - NO external knowledge, (2) If claims insufficient: 0.5, "
        "(3) Output ONLY the JSON array - NO reasoning text.\n"
        "Will Omega win?\n\n"
        "CLAIMS (reference by ID):\n[1] a fact\n[2] another fact\n[3] a third\n\n"
        "Predict for each SET using ONLY claims with listed IDs. Empty set = default value.\n"
        "SET 1: [1, 3]\nSET 2: [2]\n\n"
        'OUTPUT: JSON array with exactly 2 objects, one per SET: "set" its number, "p" the probability (from 0 to 1) of up.\n'
        'Format: [{"set": 1, "p": ...}, {"set": 2, "p": ...}, ...]'
    )


# ----------------------------------------------------------------------------- batched = one coalition at a time


STAMPS = ("started_at", "finished_at", "batch")


@pytest.mark.parametrize("kind", ["classification", "regression", "ranking"])
def test_batched_lines_equal_the_single_path(server, tmp_path, kind):
    single = _kind_study(tmp_path / "single", kind, server.url, 1)
    res = _job(single, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    n_single = len(server.prompts)
    assert n_single == 15 + 7  # every non-empty coalition of 4 and of 3 claims, one request each
    batched = _kind_study(tmp_path / "batched", kind, server.url, 4)
    res = _job(batched, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    sent = server.prompts[n_single:]
    assert len(sent) == 4 + 2  # ceil(15 / 4) + ceil(7 / 4): claims listed once a request
    assert all("CLAIMS (reference by ID):" in p and "SET 1: []" not in p for p in sent)  # the empty set never asked
    a = {r["key"]: r for r in _lines(single)}
    b = {r["key"]: r for r in _lines(batched)}
    assert set(a) == set(b) and len(a) == 22
    for k, line in b.items():
        assert {f: x for f, x in line.items() if f not in STAMPS} == {f: x for f, x in a[k].items() if f not in STAMPS}
        assert 1 <= line["batch"]["set"] <= line["batch"]["sets"] <= 4
    # the side file holds each request and its answer once
    log = _lines(batched, "claims_value.batches.jsonl")
    assert sorted(e["prompt"] for e in log) == sorted(sent)
    ta, tb = build(load_study(single)), build(load_study(batched))
    sa = ta["claims"].sort_values(["instance_id", "claim_id"])["shapley"].astype(float).to_numpy()
    sb = tb["claims"].sort_values(["instance_id", "claim_id"])["shapley"].astype(float).to_numpy()
    assert (tb["instance_leakage"]["status"] == "ok").all() and np.array_equal(sa, sb)
    # a second run asks nothing; nor does switching the single study to batches (its lines are read)
    n = len(server.prompts)
    for study in (batched, single):
        v = yaml.safe_load(study.read_text())
        v["claims_coalition_batch"] = 256
        study.write_text(yaml.safe_dump(v))
        res = _job(study, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
    assert len(server.prompts) == n


def test_the_seeds_batch_size_asks_one_request_an_instance(server, tmp_path):
    study = _kind_study(tmp_path, "classification", server.url, 256)
    res = _job(study, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(server.prompts) == 2 and "15 coalitions" not in res.stdout
    assert sorted(len(_sets(p)[1]) for p in server.prompts) == [7, 15]
    lines = _lines(study)
    assert len(lines) == 22 and len({r["key"] for r in lines}) == 22
    for r in lines:  # v(S) the stated number of the coalition's own claims
        claims = [c for k, c in enumerate(_sets(server.prompts[0])[0]) if r["mask"] >> k & 1]
        assert r["label_probs"]["up"] == _value("classification", claims)


# ----------------------------------------------------------------------------- bad batch answers


def bad_then_good(prompt: str) -> str:
    """The first batched answer of instance c1: SET 2 missing, SET 3 p = 1.7, SET 4 a
    word, SET 5 twice, an object for SET 99 and one without a number; the re-asked
    sets are answered well. Instance c2 (ALWAYS-BAD) never answers SET 1 well."""
    if "CLAIMS (reference by ID):" not in prompt:
        return _single_answer(prompt)
    objs = _batch_objects(prompt)
    if "ALWAYS-BAD" in prompt:
        objs[0]["p"] = "up"
        return json.dumps(objs)
    if "YOUR PREVIOUS ANSWER WAS INVALID" in prompt:
        return "```json\n" + json.dumps(objs) + "\n```"  # a fence around the array is read
    objs[2]["p"], objs[3]["p"] = 1.7, "likely"
    objs = [o for o in objs if o["set"] != 2] + [dict(objs[4]), {"set": 99, "p": 0.1}, {"p": 0.2}]
    return json.dumps(objs)


def test_missing_and_invalid_sets_are_asked_again_then_fail(tmp_path):
    srv = Server(bad_then_good)
    try:
        study = _kind_study(tmp_path, "classification", srv.url, 256)
        v = yaml.safe_load(study.read_text())
        v["claims_predictions_path"] = str(tmp_path / "p.csv")
        study.write_text(yaml.safe_dump(v))
        import pandas as pd

        p = pd.read_csv(tmp_path / "p.csv")
        p.loc[p["instance_id"] == "c2", "task_input"] = "ALWAYS-BAD Omega."
        p.to_csv(tmp_path / "p.csv", index=False)
        res = _job(study, timeout=300)
        assert res.returncode != 0 and "no complete answer" in res.stdout + res.stderr
        assert "Traceback" not in res.stdout + res.stderr
        first = [x for x in srv.prompts if "INVALID" not in x]
        retries = [x for x in srv.prompts if "INVALID" in x]
        assert len(first) == 2
        # c1: sets 2-5 re-asked in one batch (half of 15 rounds up to 8); c2: set 1 once
        c1 = [x for x in retries if "ALWAYS-BAD" not in x]
        assert len(c1) == 1 and len(_sets(c1[0])[1]) == 4
        assert "SET 1: missing from the answer" in c1[0] and "SET 2: 1.7 is not a probability (0 to 1)" in c1[0]
        assert "SET 3: 'likely' is not a number >= 0" in c1[0] and "SET 4: answered more than once" in c1[0]
        c2 = [x for x in retries if "ALWAYS-BAD" in x]
        assert len(c2) == 1 and len(_sets(c2[0])[1]) == 1
        lines = _lines(study)
        assert len(lines) == 15 + 6 and {r["instance_id"] for r in lines if r["attempts"] == 2} == {"c1"}
        assert sum(r["attempts"] == 2 for r in lines) == 4
        fails = _lines(study, "claims_value.failures.jsonl")
        assert len(fails) == 1 and "unparseable classification answer after 2 attempt(s): set 1:" in fails[0]["reason"]
        # each stored value is the coalition's own: the bad first answers were not stored
        claims = _sets(first[0])[0]
        for r in lines:
            if r["instance_id"] == "c1":
                assert r["label_probs"]["up"] == _value("classification", [c for k, c in enumerate(claims) if r["mask"] >> k & 1])
        # the next run asks only the failed coalition, in a batch of one
        n = len(srv.prompts)
        res = _job(study, timeout=300)
        assert len(srv.prompts) == n + 2 and all(len(_sets(x)[1]) == 1 for x in srv.prompts[n:])
    finally:
        srv.srv.shutdown()


# ----------------------------------------------------------------------------- refused combinations


@pytest.mark.parametrize(
    ("override", "needs"),
    [
        ({"claims_coalition_prompt": "legacy"}, "claims_coalition_prompt: seed"),
        ({"claims_coalition_value": "token"}, "stated values"),
    ],
)
def test_batches_need_the_seed_prompt_and_stated_values(tmp_path, override, needs):
    study = _kind_study(tmp_path, "classification", "http://127.0.0.1:9/v1", 256, **override)
    res = _job(study, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "setting 'claims_coalition_batch': 256" in out and needs in out
    assert "Traceback" not in out
