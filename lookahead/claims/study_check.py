"""`lookahead check` for a claim-only study (``study_kind: claims``): the claim inputs a
run would read, judged before anything is asked.

Why: a claim-only study has no observations file, so the protocol's checks (rows, dates,
clusters, recall labels) have nothing to read; what can go wrong is in the claim files.
A predictions file whose rows do not fit the task kind, a missing column, a corpus with
bad dates or no corpus at all, or a model folder that is not there were found only by the
jobs, after the first model was loaded. The findings use the protocol check's levels and
exit codes (lookahead.check_rules: refused 2, warned 5, clean 0) and its rejected-row
thresholds (check_warn_rejected_share, check_refuse_rejected_share), so one script reads
both kinds of study the same way, and `lookahead run` refuses where this check refuses.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lookahead.check_rules import REFUSE, WARN, Finding
from lookahead.config import Study


@dataclass
class ClaimInputs:
    """What the claim files hold, as the jobs will read them (counts, for the check's line)."""

    lines: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def _rejected_share(study: Study, n_valid: int, rejects: list[dict], what: str) -> Finding | None:
    """The protocol check's rejected-share rule on the claim rows (predictions, instances)."""
    n = n_valid + len(rejects)
    if not n or not rejects:
        return None
    share = len(rejects) / n
    refuse, warn = float(study.input.check_refuse_rejected_share), float(study.input.check_warn_rejected_share)
    if share <= warn and share <= refuse:
        return None
    level, setting, limit = (
        (REFUSE, "check_refuse_rejected_share", refuse) if share > refuse else (WARN, "check_warn_rejected_share", warn)
    )
    (column, reason), n_top = Counter((str(r["column"]), str(r["reason"])) for r in rejects).most_common(1)[0]
    first = next(r for r in rejects if (str(r["column"]), str(r["reason"])) == (column, reason))
    return Finding(
        level,
        f"{len(rejects)} of {n} {what} rows rejected ({share:.1%}, above {setting} {limit:g}); "
        f"top reason: column {column}: {reason} ({n_top} rows, first row {first['row']})",
    )


def judge_claims(study: Study) -> ClaimInputs:
    """The claim study's inputs read as the jobs read them, and what the check finds."""
    from lookahead.claims.inputs import (
        INSTANCE_COLUMNS,
        ClaimsResolved,
        _check_columns,
        _read,
        claim_study,
        load_corpus,
        load_predictions,
        load_reference_extractions,
        usable_instances,
    )

    out = ClaimInputs()
    st = ClaimsResolved.from_study(study)
    if st.predictions_path is None and st.instances_path is None:
        out.findings.append(
            Finding(
                REFUSE,
                "a claim study needs claims_predictions_path (predictions with "
                "rationales) or claims_instances_path (task instances for the agent "
                "jobs); neither is set",
            )
        )
        return out
    model = claim_study(study)
    if model.backend.backend in ("transformers", "vllm"):
        folder = model.resolve(str(model.backend.model_path))
        if not folder.exists():
            setting = "claims_model_path" if study.claims.claims_model_path else "model_path"
            out.findings.append(Finding(REFUSE, f"setting '{setting}': no model folder {folder}"))
    n_valid = 0
    if st.predictions_path is not None:
        preds, rejects = load_predictions(study, st)
        out.lines.append(
            f"{st.predictions_path.name}: {len(preds)} predictions ({preds['agent'].nunique() if len(preds) else 0} "
            f"agent(s), task kind {st.claims.claims_task_kind}), {len(rejects)} rejected"
        )
        n_valid += len(preds)
        if (f := _rejected_share(study, len(preds), rejects, "prediction")) is not None:
            out.findings.append(f)
        refs = load_reference_extractions(st)
        if refs and st.extractions_path is not None:  # references come from that file alone
            covered = sum((str(r.instance_id), str(r.agent)) in refs for r in preds.itertuples())
            out.lines.append(
                f"{st.extractions_path.name}: reference extractions for {covered} of {len(preds)} "
                "predictions (the others are extracted by the model)"
            )
    if st.instances_path is not None:
        df = _read(st.instances_path, "claims_instances_path")
        _check_columns(df, INSTANCE_COLUMNS, (), "claims_instances_path", st.instances_path)
        rows, rejects = usable_instances(df, "instances", False, st)
        agents = ", ".join(study.claims.claims_agent_jobs or []) or "none (claims_agent_jobs is empty)"
        out.lines.append(
            f"{st.instances_path.name}: {len(rows)} task instances for the agent jobs ({agents}), {len(rejects)} rejected"
        )
        n_valid += len(rows)
        if (f := _rejected_share(study, len(rows), rejects, "instance")) is not None:
            out.findings.append(f)
    if not n_valid:
        out.findings.append(
            Finding(
                REFUSE, "no usable instance in the claim files (every row rejected, or the files are empty): nothing to score"
            )
        )
    corpus, corpus_rejects = load_corpus(st)
    if st.corpus_path is None:
        out.findings.append(
            Finding(
                WARN,
                "no claims_corpus_path: claims of categories A1-A3 are dated by their "
                "temporal reference alone, else unverifiable; give a dated corpus",
            )
        )
    else:
        out.lines.append(f"{st.corpus_path.name}: {len(corpus)} dated documents, {len(corpus_rejects)} rejected")
        if corpus_rejects:
            r = corpus_rejects[0]
            out.findings.append(
                Finding(
                    WARN,
                    f"{len(corpus_rejects)} corpus row(s) rejected (claims_corpus_path), "
                    f"first row {r['row']} column {r['column']}: {r['reason']}",
                )
            )
    return out


def check_claim_study(study: Study) -> int:
    """Print what the claim files hold and every finding; the check's exit code."""
    import sys

    from lookahead.check_rules import EXIT_REFUSED, EXIT_WARNED

    print(
        f"study '{study.name}': settings OK (hash {study.settings_hash[:12]}); claim-only study "
        f"(study_kind: claims), task kind {study.claims.claims_task_kind}"
    )
    found = judge_claims(study)
    for line in found.lines:
        print(line)
    findings = sorted(found.findings, key=lambda f: f.level != REFUSE)
    for f in findings:
        print(f"{f.level}: {f.line}", file=sys.stderr)
    if any(f.level == REFUSE for f in findings):
        return EXIT_REFUSED
    print("claim check passed: the claim jobs can run (lookahead run --study <file>)")
    return EXIT_WARNED if findings else 0
