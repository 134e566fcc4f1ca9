"""`lookahead check` judges the study, not only the file: rules that read the scanned rows
and the settings and say whether the study, run as it is, can reach an honest verdict.

Why: a file with a third of its rows rejected for ambiguous dates, a sample with no
post-cutoff row, a handful of clusters, recall labels under which LAP cannot vary, or
forecast labels the prompt never asks for all
passed the file checks and the preflight, and the researcher paid for queries whose
verdict was compromised from the start. Each rule is one entry of :data:`RULES`; each
threshold is a study setting with a default (lookahead/study_settings.yml), and a finding
names that setting, so the line says both what is wrong and what to change.

Outcome (exit codes of `lookahead check`, docs/backends.md): a refusal stops the check
before the preflight (EXIT_REFUSED); warnings let it go on, and a check that passed with
warnings ends EXIT_WARNED, so that a script can tell a clean study from a doubtful one.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from lookahead.config import Study
from lookahead.rows import REJECT_REASONS_FILE, RowScan

EXIT_REFUSED = 2  # the same code as any setting to fix: the study cannot run as it is
EXIT_WARNED = 5  # passed, with warnings to read before paying for a run

REFUSE, WARN = "refused", "warning"


@dataclass(frozen=True)
class Finding:
    """One thing a rule found: its level (refused or warning) and its one line."""

    level: str
    line: str


@lru_cache(maxsize=1)
def what_fixes() -> dict[str, str]:
    """Reject reason -> what to check (seeds/reject_reasons.csv, the reasons' one home)."""
    with open(REJECT_REASONS_FILE, encoding="utf-8", newline="") as fh:
        return {r["reason"]: r["what_to_check"] for r in csv.DictReader(fh)}


def _rejected(study: Study, scan: RowScan) -> Finding | None:
    """More than check_refuse_rejected_share of the rows rejected refuses, more than
    check_warn_rejected_share warns; both name the top reason and what fixes it."""
    if not scan.n:
        return None
    share = scan.n_rejected / scan.n
    refuse, warn = float(study.input.check_refuse_rejected_share), float(study.input.check_warn_rejected_share)
    if share <= warn and share <= refuse:
        return None
    level, setting, limit = (
        (REFUSE, "check_refuse_rejected_share", refuse) if share > refuse else (WARN, "check_warn_rejected_share", warn)
    )
    counts = scan.reject_counts()
    top, n_top = str(counts.index[0]), int(counts.iloc[0])
    return Finding(
        level,
        f"{scan.n_rejected} of {scan.n} rows rejected ({share:.1%}, above {setting} "
        f"{limit:g}); top reason '{top}' ({n_top} rows): {what_fixes().get(top, 'the data file')}",
    )


def _pre_cutoff(study: Study, scan: RowScan) -> np.ndarray:
    last = np.datetime64(pd.Timestamp(str(study.protocol.training_cutoff)).floor("D").date(), "D").astype(np.int64)
    return scan.queried & (scan.target_day <= last)


def _no_post_cutoff(study: Study, scan: RowScan) -> Finding | None:
    """No post-cutoff row: the placebo (protocol step 5) cannot run."""
    if scan.n_queried and int(_pre_cutoff(study, scan).sum()) == scan.n_queried:
        return Finding(
            WARN,
            f"no post-cutoff row (every target_date is on or before training_cutoff "
            f"{study.protocol.training_cutoff}): the placebo cannot run, and the protocol's "
            "verdict needs it; add later rows, or check training_cutoff",
        )
    return None


def _few_clusters(study: Study, scan: RowScan) -> Finding | None:
    """Fewer than check_min_effective_clusters effective clusters among the pre-cutoff
    rows: G*(0) of Carter, Schnepel and Steigerwald (2017) for equal weights, from the
    cluster sizes alone (the regression's own G* is in the report). Clusters by entity or
    by date; other cluster settings are not judged here."""
    from lookahead.stats.wild import effective_clusters

    codes = {"entity": scan.entity_codes, "date": scan.target_day}.get(str(study.protocol.cluster))
    pre = _pre_cutoff(study, scan)
    if codes is None or not pre.any():
        return None
    _, cluster = np.unique(codes[pre], return_inverse=True)
    n_groups = int(cluster.max()) + 1
    g_star = effective_clusters(np.ones(cluster.size), cluster, n_groups)
    limit = float(study.protocol.check_min_effective_clusters)
    if not g_star < limit:
        return None
    return Finding(
        WARN,
        f"the pre-cutoff rows form {n_groups} clusters (cluster: {study.protocol.cluster}), "
        f"{g_star:.1f} effective (G*), fewer than check_min_effective_clusters {limit:g}: "
        "cluster-robust inference is unreliable; add entities, or expect an underpowered verdict",
    )


def _lap_cannot_vary(study: Study, scan: RowScan) -> Finding | None:
    """A recall query that does not offer the unknown label: the model must answer up or
    down, P(up) + P(down) is near 1 for every pair, and LAP cannot separate recalled from
    unrecalled outcomes."""
    labels = study.prompts.recall_labels or {}
    unknown = str(labels.get("unknown", ""))
    template = str(study.prompts.recall_template)
    if unknown and unknown not in template and "{label_unknown}" not in template:
        return Finding(
            WARN,
            f"recall_template never offers the unknown label '{unknown}' (recall_labels): "
            "LAP = P(up) + P(down) is then near 1 for every pair and cannot vary; "
            "ask for it in recall_template",
        )
    return None


def _forecast_labels_unasked(study: Study, scan: RowScan) -> Finding | None:
    """A forecast label the forecast prompt never names: the model is not told the answer
    word, and answers that match no label stop the forecast job only after its first 50
    paid answers (llm_jobs.forecast)."""
    prompt = str(study.prompts.forecast_prompt).lower()
    unasked = [str(k) for k in (study.prompts.forecast_labels or {}) if str(k).lower() not in prompt]
    if unasked:
        return Finding(
            WARN,
            f"forecast_prompt never names the forecast label(s) {', '.join(map(repr, unasked))} "
            "(forecast_labels): answers that match no label are unparsed; ask for the labels "
            "in the prompt, or map the words it asks for",
        )
    return None


RULES: dict[str, Callable[[Study, RowScan], Finding | None]] = {
    "rejected rows": _rejected,
    "post-cutoff rows": _no_post_cutoff,
    "effective clusters": _few_clusters,
    "LAP variation": _lap_cannot_vary,
    "forecast labels": _forecast_labels_unasked,
}


def judge(study: Study, scan: RowScan) -> list[Finding]:
    """Every rule's finding, refusals first."""
    found = [f for rule in RULES.values() if (f := rule(study, scan)) is not None]
    return sorted(found, key=lambda f: f.level != REFUSE)
