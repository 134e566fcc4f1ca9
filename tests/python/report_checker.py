"""A mechanical reader of REPORT.md: does every sentence of the verdict hold for the
numbers beside it? Independent of the renderer (it imports nothing from lookahead): it
parses the Markdown and the regression CSVs the tool wrote, and lists each violation.

Checks
- numbers: every number the verdict sentence quotes for a named quantity (beta_3, its
  t, p and N; the post-cutoff beta_3; the high- and low-LAP thetas; the per-sd thetas and
  their difference; the minimum detectable effect) equals the report cell that holds that
  quantity, in the same unit, and a quoted p equals the cell of the source it names;
- comparisons: "exceeds ... A against B, a difference of D" needs A > B and A - B = D;
  "X exceeds low-LAP theta Y by D" (the old wording) the same; "but smaller" needs the
  smaller number; "indistinguishable from zero" needs a named two-sided p >= 0.05;
  "significantly negative" a named p < 0.05 and a negative estimate, from the wild
  bootstrap when the sentence says the tests read it; "above T", "not above
  T", "below T", "not below T", "> T", "<= T" must hold for the printed p; "beta_3 = X
  ... > 0" needs X > 0; the verdict's own threshold (0.05 for beta_3, 0.1 for the
  placebo) must hold for the printed p;
- p-values: none printed as a bare 0 (a bootstrap zero is "< 1/(B+1)");
- cells: no cell is a number and "not estimable"; a tested term that is "not estimable"
  has no numeric p in its row; every coefficient cell equals regression_results.csv (a
  number where the estimator gave one, "not estimable" only where it gave none);
- reason: it starts with the verdict; "no pre-cutoff row has a LAP value" needs a LAP
  table with n = 0 before the cutoff; with every forecast unparsed the reason says the
  forecasts are missing; "placebo infeasible" exactly when there are no post-cutoff rows;
  "LAP is constant" needs sd 0; a report that names its decision path uses that path's
  wording (PATH_WORDS);
- no estimator-internal text (FORBIDDEN);
- "not estimable" beside an estimate: a sentence of the verdict line or a section that
  calls beta_3 (pre- or post-cutoff) not estimable while its section table or checklist
  row prints a number for it; a "not informative" cell has no p beside it either;
- one p format: a bootstrap p at its floor prints as "< X (1/(B+1), B = N)" with one X
  per B, X a plain decimal of at most two significant digits and at least 1/(B+1), in
  REPORT.md and in the LaTeX tables beside it; never a bracketed zero ("[0]", "[0.000]");
- figure captions: a caption that names LAP names its measure (MEASURE_NAMES), and one
  that plots deciles says how they were formed ("deciles formed within ...")."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

FORBIDDEN = ("reach out", "package authors", "Maybe your model specification", "Traceback", "Exception", "please ")
PATH_WORDS = {
    "no_pre_rows": "there are no pre-cutoff rows",
    "beta3_not_estimable": "beta_3 is not estimable",
    "null_no_variation": "LAP shows no meaningful variation",
    "significant_no_variation": "LAP shows no meaningful variation",
    "null_negative": "is significantly negative",
    "null_zero": "is indistinguishable from zero",
    "null_not_positive": "is not significantly positive",
    "contamination": "validation pattern present",
    "mixed": "Mixed/invalid (",
}
NUM = r"-?(?:\d{1,3}(?:,\d{3})+(?:\.\d*)?|\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?"  # 1,234,567 too
PVAL = rf"(?:< )?{NUM}"
#: The LAP measures a figure caption may name (docs/measures.md), as the report prints them
MEASURE_NAMES = ("recall LAP", "Min-K%", "loss LAP", "zlib LAP", "Min-K%++", "reference-model LAP")
FLOOR = re.compile(rf"< ({NUM}) \(1/\(B\+1\), B = (\d+)\)")


# ---------------------------------------------------------------- parsing


def sections(text: str) -> dict[str, str]:
    out, name = {}, "head"
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            name = line[3:].strip()
        out[name] = out.get(name, "") + line
    return out


def tables(block: str) -> list[list[dict[str, str]]]:
    """Markdown tables of a section: each a list of {header: cell}."""
    out, lines = [], block.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            head = [c.strip() for c in lines[i].strip().strip("|").split(" | ")]
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("| "):
                cells = [c.strip() for c in lines[j].strip()[1:-1].split(" | ")]
                rows.append(dict(zip(head, cells, strict=False)))
                j += 1
            out.append(rows)
            i = j
        else:
            i += 1
    return out


def section(secs: dict[str, str], prefix: str) -> str:
    return next((v for k, v in secs.items() if k.startswith(prefix)), "")


def row(secs: dict[str, str], prefix: str, label: str, column_has: str) -> dict[str, str] | None:
    for tab in tables(section(secs, prefix)):
        for r in tab:
            if r.get("sample") == label and any(column_has in h for h in r):
                return r
    return None


def num(text: str) -> float:
    m = re.match(rf"\s*({NUM})", text or "")
    return float(m.group(1).replace(",", "")) if m else math.nan


def sig_equal(a: str, b: str) -> bool:
    """Two printed numbers agree: the more precise lies within the rounding interval of
    the less precise (0.4955 and 0.496 both print a t of 0.49555)."""
    x, y = num(a), num(b)
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    if x == y:
        return True

    def half_ulp(s: str, v: float) -> float:
        mant = s.split("e")[0].replace(",", "").lstrip("-")
        digits = len(re.sub(r"[^0-9]", "", mant.lstrip("0.")))
        return 0.5 * 10 ** (math.floor(math.log10(abs(v))) - max(digits, 1) + 1) if v else 0.0

    return abs(x - y) <= 1.0001 * (half_ulp(a, x) + half_ulp(b, y))


def p_value(text: str) -> tuple[float, bool]:
    """(value, is an upper bound) of a printed p."""
    t = text.strip()
    return (num(t[2:]), True) if t.startswith("< ") else (num(t), False)


def _cell_estimate(cell: str) -> tuple[str, str]:
    m = re.match(rf"({NUM}) \(({NUM})\)$", cell or "")
    return (m.group(1), m.group(2)) if m else ("", "")


# ---------------------------------------------------------------- checks


def check(text: str, results_dir: Path | None = None) -> list[str]:
    """Every violation found in one REPORT.md (empty: the report reads true)."""
    problems: list[str] = []
    secs = sections(text)
    m = re.search(r"^\*\*Verdict: (.+?)\.\*\* (.*)$", text, re.M)
    if not m:
        return ["no verdict line"]
    # "Mixed/invalid (placebo failed)": the decision, then what failed
    verdict, reason = re.sub(r" \(.*\)$", "", m.group(1)), m.group(2)
    problems += _numbers(secs, reason)
    # the section sentences that restate parts of the verdict are read with it
    others = " ".join(re.findall(r"^(?:Placebo: .*|.*Here: .*)$", text, re.M))
    problems += _comparisons(verdict, reason + " " + others)
    problems += _zeros(text)
    problems += _cells(secs, results_dir)
    problems += _reason(secs, verdict, reason, text, m.group(0))
    problems += [f"estimator-internal text: {w!r}" for w in FORBIDDEN if w in text]
    problems += _not_estimable_beside_estimate(secs, m.group(0), others)
    problems += _p_formats(text, results_dir)
    problems += _captions(text)
    return problems


def _first_cell(secs: dict[str, str], prefix: str, label: str) -> str:
    r = row(secs, prefix, label, "mu_hat:lap")
    return (r or {}).get("mu_hat:lap (t)", "")


def _checklist_estimate(secs: dict[str, str], step: str) -> str:
    for tab in tables(section(secs, "Checklist")):
        for r in tab:
            if r.get("step", "") == step:
                return r.get("estimate (t)", "")
    return ""


def _not_estimable_beside_estimate(secs: dict[str, str], line: str, others: str) -> list[str]:
    """A sentence calls beta_3 not estimable while a cell prints its number: the verdict
    line for either beta_3, the section sentences (``others``) for the post-cutoff one (a
    rule stated in general, "so that beta_3 is not estimable", is no claim about a cell)."""
    problems: list[str] = []
    post_says = re.search(r"post-cutoff (?:LAP collapsed, )?beta_3 (?:is )?not estimable", line + " " + others)
    pre_says = re.search(r"(?<!post-cutoff )(?<!collapsed, )\bbeta_3 (?:is )?not estimable", line)
    for says, what, cells in (
        (post_says, "post-cutoff beta_3", (_first_cell(secs, "5.", "post-cutoff"), _checklist_estimate(secs, "5. Placebo"))),
        (pre_says, "beta_3", (_first_cell(secs, "4.", "pre-cutoff"), _checklist_estimate(secs, "4. Detection"))),
    ):
        shown = [c for c in cells if re.match(NUM, c or "")]
        if says and shown:
            problems.append(
                f"'not estimable' sentence beside an estimate: {what} is said not estimable while a cell shows {shown[0]!r}"
            )
    return problems


def _p_formats(text: str, results_dir: Path | None) -> list[str]:
    """One printed form per bootstrap floor, in the report and its LaTeX tables."""
    texts = [("REPORT.md", text)]
    if results_dir is not None and (results_dir / "tables").is_dir():
        texts += [(f"tables/{p.name}", p.read_text(encoding="utf-8")) for p in sorted((results_dir / "tables").glob("*.tex"))]
    problems: list[str] = []
    seen: dict[int, set[str]] = {}
    for where, body in texts:
        for m in FLOOR.finditer(body):
            bound, draws = m.group(1), int(m.group(2))
            seen.setdefault(draws, set()).add(bound)
            digits = bound.replace(".", "").lstrip("0").rstrip("0")  # significant digits
            if "e" in bound.lower() or len(digits) > 2 or float(bound) < 1 / (draws + 1):
                problems.append(
                    f"a p in two formats: bound {bound!r} for B = {draws} in {where} "
                    "(a plain decimal of at most two digits, at least 1/(B+1))"
                )
        for m in re.finditer(r"\[(0(?:\.0+)?)\]", body):
            problems.append(f"a p in two formats: a bracketed zero {m.group(0)!r} in {where}")
    for draws, bounds in seen.items():
        if len(bounds) > 1:
            problems.append(f"a p in two formats: B = {draws} floor printed as {sorted(bounds)}")
    return problems


def _captions(text: str) -> list[str]:
    """A figure caption names its measure and, for deciles, how they were formed."""
    problems: list[str] = []
    for m in re.finditer(r"!\[([^\]]*)\]\(", text):
        cap = m.group(1)
        if "LAP" in cap and not any(name in cap for name in MEASURE_NAMES):
            problems.append(f"figure caption without its measure: {cap!r}")
        if "decile" in cap.lower() and "deciles formed within" not in cap:
            problems.append(f"figure caption without its decile rule: {cap!r}")
    return problems


def _p_cell(r: dict[str, str], sided: str, source: str) -> str:
    wild = "wild" in source
    for h, v in r.items():
        if sided == "one-sided" and "one-sided p" in h and ("wild" in h) == wild:
            return v
        if sided == "two-sided" and "p (two-sided)" in h and ("wild" in h) == wild:
            return v
    return ""


def _same(problems: list[str], what: str, quoted: str, cell: str) -> None:
    if not sig_equal(quoted, cell) and not (quoted.startswith("< ") and quoted == cell):
        problems.append(f"{what}: sentence says {quoted!r}, the cell holds {cell!r}")


def _numbers(secs: dict[str, str], reason: str) -> list[str]:
    problems: list[str] = []
    det = row(secs, "4.", "pre-cutoff", "mu_hat:lap")
    b = re.search(
        rf"beta_3 = ({NUM}) \(t ({NUM}), one-sided p ({PVAL})"
        rf"(?: \(1/\(B\+1\), B = \d+\))?(?: by ([A-Za-z1 -]+?))?(?: \(\d+ draws\))?"
        rf"(?:, (wild bootstrap))?, N (\d+)\)",
        reason,
    )
    if b and det is not None:
        est, t = _cell_estimate(det.get("mu_hat:lap (t)", ""))
        _same(problems, "beta_3", b.group(1), est)
        _same(problems, "beta_3 t", b.group(2), t)
        source = b.group(4) or b.group(5) or "CRV1"
        cell = _p_cell(det, "one-sided", source)
        quoted = b.group(3)
        if cell.startswith("< "):
            cell = cell.split(" (")[0]
        _same(problems, f"beta_3 one-sided p ({source})", quoted, cell)
        _same(problems, "beta_3 N", b.group(6), det.get("N", ""))
    elif b is None and "beta_3 =" in reason:
        problems.append("beta_3 quoted in a form the checker cannot tie to a cell")
    post = row(secs, "5.", "post-cutoff", "mu_hat:lap")
    pb = re.search(rf"post-cutoff beta_3 ({NUM})", reason)
    if pb:
        est, _ = _cell_estimate((post or {}).get("mu_hat:lap (t)", ""))
        _same(problems, "post-cutoff beta_3", pb.group(1), est or (post or {}).get("mu_hat:lap (t)", "NA"))
    for label, name in (("high LAP", "high-LAP theta"), ("low LAP", "low-LAP theta")):
        r = row(secs, "3.", label, "ud (t)")
        quoted = re.search(rf"{name} is [a-z ]+\(({NUM}) per unit of U-D, t ({NUM})", reason) or re.search(
            rf"{name} ({NUM}) \(t ({NUM})", reason
        )
        if name == "low-LAP theta" and not quoted:
            quoted = re.search(rf"low-LAP theta is itself significant \(({NUM}) per unit of U-D", reason)
        if quoted and r is not None:
            est, t = _cell_estimate(r.get("ud (t)", ""))
            _same(problems, name, quoted.group(1), est)
            if quoted.re.groups >= 2 and quoted.lastindex and quoted.lastindex >= 2:
                _same(problems, f"{name} t", quoted.group(2), t)
    per_sd = re.search(rf"({NUM}) against ({NUM}), a difference of ({NUM})", reason)
    if per_sd:
        cells = {
            r.get("theta per sd of U-D within its half", ""): r.get("estimate", "")
            for tab in tables(section(secs, "3."))
            for r in tab
        }
        for i, key in ((1, "high-LAP"), (2, "low-LAP"), (3, "difference")):
            cell = next((v for k, v in cells.items() if k.startswith(key)), "")
            _same(problems, f"{key} theta per sd", per_sd.group(i), cell)
    mde = re.search(rf"(?:minimum detectable beta_3 is|rules out effects larger than beta_3 =) ({NUM})", reason)
    shown = re.search(rf"Minimum detectable beta_3 \(one-sided 5% test, 80% power\): ({NUM}|NA)", section(secs, "4."))
    if mde and shown:
        _same(problems, "minimum detectable effect", mde.group(1), shown.group(1))
    return problems


def _holds(value: float, bound: bool, op: str, threshold: float) -> bool:
    if not math.isfinite(value):
        return False
    if bound:  # "< value": the true p is below value
        return {
            "above": False,
            ">": False,
            "not above": value <= threshold,
            "<=": value <= threshold,
            "below": value <= threshold,
            "not below": False,
        }[op]
    return {
        "above": value > threshold,
        ">": value > threshold,
        "not above": value <= threshold,
        "<=": value <= threshold,
        "below": value < threshold,
        "not below": value >= threshold,
    }[op]


def _comparisons(verdict: str, reason: str) -> list[str]:
    problems: list[str] = []
    for m in re.finditer(rf"({NUM}) against ({NUM}), a difference of ({NUM})", reason):
        a, b, d = (num(m.group(i)) for i in (1, 2, 3))
        before = reason[: m.start()]
        if before.rstrip().endswith("exceeds the low-LAP theta:") and not a > b:
            problems.append(f"'exceeds' with {a} against {b}")
        if abs(a - b - d) > 2e-3 * max(abs(a), abs(b), abs(d), 1e-300):
            problems.append(f"difference {d} is not {a} - {b}")
    old = re.search(
        rf"high-LAP theta ({NUM}) \(t {NUM}, p {PVAL}\) exceeds low-LAP theta ({NUM}) "
        rf"\(t {NUM}, p {PVAL}\) by ({NUM})",
        reason,
    )
    if old:
        a, b, d = (num(old.group(i)) for i in (1, 2, 3))
        if not a > b:
            problems.append(f"'exceeds' with {a} against {b}")
        if abs(a - b - d) > 2e-3 * max(abs(a), abs(b), abs(d)):
            problems.append(f"'by {d}' is not {a} - {b}")
        if "but smaller" in reason and not b < a:
            problems.append(f"'smaller' with low {b} against high {a}")
    for m in re.finditer(r"indistinguishable from zero( \(two-sided p " + PVAL + ")?", reason):
        if not m.group(1):
            problems.append("'indistinguishable from zero' without the p it read")
        else:
            v, bound = p_value(m.group(1)[len(" (two-sided p ") :])
            if not _holds(v, bound, "not below", 0.05):
                problems.append(f"'indistinguishable from zero' with two-sided p {v}")
    for m in re.finditer(rf"({NUM}) \(t {NUM}, [^)]*?\) is significantly negative \((?:two-sided p ({PVAL}))?", reason):
        est = num(m.group(1))
        if not m.group(2):
            problems.append("'significantly negative' without the p it read")
        elif not (_holds(*p_value(m.group(2)), "below", 0.05) and est < 0):
            problems.append(f"'significantly negative' with {est}, p {m.group(2)}")
    few = re.search(r"the tests (?:read|use) wild cluster bootstrap p-values", reason)
    negative = rf"significantly negative \(two-sided p ({PVAL})(?: \(1/\(B\+1\), B = \d+\))?( by [A-Za-z1 -]+)?"
    for m in re.finditer(negative, reason):
        if few and not m.group(2):
            problems.append("'significantly negative' without the source of its p, while the tests read the wild bootstrap")
        elif few and "CRV1" in m.group(2):
            problems.append("'significantly negative' reads a CRV1 p while the tests read the wild bootstrap")
    for m in re.finditer(
        rf"p ({PVAL})(?: \(1/\(B\+1\), B = \d+\))?(?: by [A-Za-z1 -]+?(?: \(\d+ draws\))?)?"
        rf"(?:\)?,? )(above|not above|below|not below|>|<=) ({NUM})",
        reason,
    ):
        v, bound = p_value(m.group(1))
        if not _holds(v, bound, m.group(2), num(m.group(3))):
            problems.append(f"'p {m.group(1)} {m.group(2)} {m.group(3)}' does not hold")
    b = re.search(rf"beta_3 = ({NUM}) \(t {NUM}, one-sided p ({PVAL})", reason)
    if b:
        est = num(b.group(1))
        v, bound = p_value(b.group(2))
        significant = (
            verdict in ("Contamination detected", "Mixed/invalid")
            or "is significant, but LAP shows no meaningful variation" in reason
        )
        if significant and not _holds(v, bound, "below", 0.05):
            problems.append(f"verdict {verdict!r} with printed one-sided p {b.group(2)}")
        if not significant and _holds(v, bound, "below", 0.05):
            problems.append(f"verdict {verdict!r} with printed one-sided p {b.group(2)} below 0.05")
        if re.search(r"N \d+\) > 0", reason) and not est > 0:
            problems.append(f"'beta_3 = {est} ... > 0'")
    return problems


def is_p_header(h: str) -> bool:
    """A column of p-values: "p (two-sided)", "one-sided p (...)", "wild bootstrap ... p"."""
    return bool(re.search(r"(^|\s)p(\s|$)", h))


def _zeros(text: str) -> list[str]:
    bad = re.findall(r"\bp (0)(?=[,;)\s])", text)
    for tab_rows in tables(text):
        for r in tab_rows:
            bad += [v for h, v in r.items() if is_p_header(h) and v == "0"]
    return [f"a p-value printed as 0 ({len(bad)} time(s)); a bootstrap zero is < 1/(B+1)"] if bad else []


def _cells(secs: dict[str, str], results_dir: Path | None) -> list[str]:
    problems: list[str] = []
    csv = pd.DataFrame()
    if results_dir is not None and (results_dir / "regression_results.csv").exists():
        csv = pd.read_csv(results_dir / "regression_results.csv")
    where = {
        "3.": {
            "pooled": ("validation_pooled", "pre"),
            "high LAP": ("validation_high_lap", "pre"),
            "low LAP": ("validation_low_lap", "pre"),
            "pre-cutoff": ("validation_difference", "pre"),
        },
        "4.": {"pre-cutoff": ("detection", "pre")},
        "5.": {
            "post-cutoff": ("detection", "post"),
            "pooled": ("validation_pooled", "post"),
            "high LAP": ("validation_high_lap", "post"),
            "low LAP": ("validation_low_lap", "post"),
        },
    }
    for prefix, labels in where.items():
        for tab in tables(section(secs, prefix)):
            for r in tab:
                if r.get("sample") not in labels:
                    continue
                spec, sample = labels[r["sample"]]
                tested = next((h.split("(", 1)[1].split(" > 0")[0] for h in r if h.startswith("one-sided p (")), None)
                term_cols = [h for h in r if h.endswith(" (t)")]
                if tested is None and len(term_cols) == 1:
                    tested = term_cols[0][:-4]
                for h in term_cols:
                    cell, term = r[h], h[:-4]
                    if "not estimable" in cell and re.match(NUM, cell):
                        problems.append(f"{spec} {sample} {term}: a cell with a number and 'not estimable'")
                    if term == tested and cell.startswith(("not estimable", "not informative")):
                        ps = [v for k, v in r.items() if is_p_header(k) and re.match(r"<?\s*" + NUM, v)]
                        if ps:
                            problems.append(f"{spec} {sample} {term}: {cell.split(' (')[0]!r} beside p {ps}")
                    if len(csv):
                        sel = csv[(csv["spec"] == spec) & (csv["sample"] == sample) & (csv["term"] == term)]
                        if sel.empty:
                            continue
                        est = float(sel["estimate"].iloc[0]) if pd.notna(sel["estimate"].iloc[0]) else math.nan
                        if cell.startswith("not estimable") and math.isfinite(est):
                            problems.append(f"{spec} {sample} {term}: 'not estimable' but the estimator gave {est:.4g}")
                        elif re.match(NUM, cell) and not sig_equal(cell.split(" (")[0], repr(est)):
                            problems.append(f"{spec} {sample} {term}: cell {cell!r} is not {est!r}")
    return problems


def _metric(secs: dict[str, str], name: str) -> float:
    for tab in tables(section(secs, "1.")):
        for r in tab:
            if r.get("", "").strip() == name:
                return num(r.get("count", ""))
    return math.nan


def _reason(secs: dict[str, str], verdict: str, reason: str, text: str, line: str) -> list[str]:
    """``line``: the whole verdict line (its bold label names a Mixed/invalid's failure)."""
    problems: list[str] = []
    if reason.startswith(verdict):
        problems.append(f"the verdict {verdict!r} is said twice")
    lap_pre = math.nan
    for tab in tables(section(secs, "2.")):
        for r in tab:
            if r.get("sample") == "pre" and "n" in r:
                lap_pre = num(r["n"])
    if "no pre-cutoff row has a LAP value" in reason and lap_pre != 0:
        problems.append(f"reason says no pre-cutoff row has a LAP value; the LAP table has n = {lap_pre}")
    unparsed = _metric(secs, "rows with an unparsed forecast")
    pre_rows, post_rows = _metric(secs, "pre-cutoff rows"), _metric(secs, "post-cutoff rows")
    if math.isfinite(unparsed) and unparsed > 0 and unparsed == pre_rows + post_rows and "forecast" not in reason:
        problems.append("every forecast is unparsed but the reason does not say so")
    if (
        math.isfinite(post_rows)
        and (post_rows == 0) != ("placebo infeasible" in reason)
        and verdict in ("Contamination detected", "Mixed/invalid")
    ):
        problems.append(
            f"post-cutoff rows {post_rows} but reason says {'nothing of' if post_rows == 0 else ''} placebo infeasible"
        )
    if "LAP is constant" in reason:
        sd = next(
            (num(r["sd"]) for tab in tables(section(secs, "2.")) for r in tab if r.get("sample") == "pre" and "sd" in r), math.nan
        )
        if math.isfinite(sd) and sd != 0:
            problems.append(f"reason says LAP is constant; its sd is {sd}")
    path = re.search(r"Decision path: `([a-z0-9_]+)`", text)
    if path and PATH_WORDS.get(path.group(1), "\0").lower() not in line.lower():
        problems.append(f"decision path {path.group(1)} without its wording")
    return problems
