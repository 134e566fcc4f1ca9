"""The report's charts as Vega-Lite specs, built with Altair. One spec per chart: the
HTML page embeds it (interactive, tooltips), and REPORT.md shows the PNG that vl-convert
renders from the same spec, so the two renderings draw the same data."""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from lookahead.paper.figures import DECILE_RULE

SAMPLE_COLORS = alt.Scale(domain=["pre", "post"], range=["#c0392b", "#2e86c1"])
#: pre and post also differ by marker, so the two read apart without colour (and in grey print)
SAMPLE_SHAPES = alt.Scale(domain=["pre", "post"], range=["circle", "triangle-up"])
#: month axes carry the year: "2021-07", never a bare "July"
MONTH_AXIS = alt.Axis(format="%Y-%m", labelAngle=-40, labelOverlap=True)
#: a legend never cuts a label short ("demo-conta..."): Vega-Lite's default limit is 160 px
LEGEND = alt.Legend(labelLimit=0, orient="right")
LEAK_COLORS = alt.Scale(domain=["leaked", "not_leaked", "unverifiable"], range=["#c0392b", "#2e86c1", "#999999"])
WIDTH, HEIGHT = 560, 260


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-safe rows (NaN -> null) for inline data."""
    out = []
    for r in df.to_dict(orient="records"):
        out.append(
            {
                k: (None if isinstance(v, float) and not math.isfinite(v) else (v.item() if isinstance(v, np.generic) else v))
                for k, v in r.items()
            }
        )
    return out


def _spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    return chart.to_dict()


def lap_by_month(df: pd.DataFrame, cutoff: str, measure: str, break_month: str = "", label: str = "") -> dict[str, Any]:
    """Mean LAP per realization month with its band (p25..p75 columns), pre red circles /
    post blue triangles, the stated training cutoff as a dashed rule and, when the build
    found one, the end of the effective break month as a dotted one. `label` is the
    measure's name as the report prints it (the title names what is plotted)."""
    data = alt.Data(values=_records(df))
    label = label or f"LAP ({measure})"
    x = alt.X("month:T", title="realization month (target_date, year-month)", axis=MONTH_AXIS)
    band = (
        alt.Chart(data)
        .mark_area(opacity=0.18)
        .encode(
            x=x,
            y=alt.Y("p25:Q", title=label),
            y2="p75:Q",
            color=alt.Color("sample:N", scale=SAMPLE_COLORS, title="sample", legend=LEGEND),
        )
    )
    line = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=45, filled=True))
        .encode(
            x=x,
            y="mean_lap:Q",
            color=alt.Color("sample:N", scale=SAMPLE_COLORS),
            shape=alt.Shape("sample:N", scale=SAMPLE_SHAPES, title="sample", legend=LEGEND),
            tooltip=[
                "sample:N",
                alt.Tooltip("month:T", format="%Y-%m"),
                "n:Q",
                alt.Tooltip("mean_lap:Q", format=".4g", title="mean LAP"),
                alt.Tooltip("p25:Q", format=".4g", title="band low"),
                alt.Tooltip("p75:Q", format=".4g", title="band high"),
            ],
        )
    )
    marks = [{"at": cutoff, "label": f"stated training cutoff {cutoff}", "dy": 2, "kind": "stated"}]
    if break_month:
        end = (pd.Timestamp(break_month) + pd.offsets.MonthEnd(0)).strftime("%Y-%m-%d")
        marks.append({"at": end, "label": f"effective cutoff {end}", "dy": 18, "kind": "effective"})
    cut = alt.Data(values=marks)
    rule = (
        alt.Chart(cut)
        .mark_rule(color="black")
        .encode(
            x="at:T",
            strokeDash=alt.StrokeDash(
                "kind:N", scale=alt.Scale(domain=["stated", "effective"], range=[[6, 4], [2, 2]]), legend=None
            ),
        )
    )
    text = (
        alt.Chart(cut)
        .mark_text(align="left", dx=4, baseline="top", fontSize=11)
        .encode(x="at:T", y=alt.Y("dy:Q", scale=None), text="label:N")
    )
    return _spec(
        alt.layer(band, line, rule, text).properties(
            width=WIDTH, height=HEIGHT, title=f"{label} by realization month, stated cutoff marked"
        )
    )


def accuracy_by_decile(df: pd.DataFrame, label: str = "LAP") -> dict[str, Any]:
    """Directional accuracy by LAP decile, pre and post; `label` names the measure, so
    this figure and the paper section's (which may run on another measure) read apart."""
    data = alt.Data(values=_records(df))
    line = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=45, filled=True))
        .encode(
            x=alt.X("decile:O", title=f"{label} decile ({DECILE_RULE})", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("accuracy:Q", title="directional accuracy", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("sample:N", scale=SAMPLE_COLORS, title="sample", legend=LEGEND),
            shape=alt.Shape("sample:N", scale=SAMPLE_SHAPES, title="sample", legend=LEGEND),
            tooltip=[
                "sample:N",
                "decile:O",
                "n:Q",
                alt.Tooltip("accuracy:Q", format=".3f"),
                alt.Tooltip("lap_mean:Q", format=".4g", title="mean LAP"),
            ],
        )
    )
    chance = alt.Chart(alt.Data(values=[{"y": 0.5}])).mark_rule(strokeDash=[4, 4], color="grey").encode(y="y:Q")
    return _spec(
        alt.layer(chance, line).properties(
            width=WIDTH,
            height=HEIGHT,
            title=[f"Forecast accuracy by {label} decile, before and after the cutoff", f"({DECILE_RULE})"],
        )
    )


def lap_histogram(hist: pd.DataFrame, measure: str, label: str = "") -> dict[str, Any]:
    """Rows per LAP bin, pre and post overlaid; `label` names the measure."""
    label = label or f"LAP ({measure})"
    data = alt.Data(values=_records(hist[["sample", "bin_lower", "bin_upper", "n"]]))
    bars = (
        alt.Chart(data)
        .mark_bar(opacity=0.6)
        .encode(
            x=alt.X("bin_lower:Q", bin="binned", title=label),
            x2="bin_upper:Q",
            y=alt.Y("n:Q", stack=None, title="rows"),
            color=alt.Color("sample:N", scale=SAMPLE_COLORS, title="sample", legend=LEGEND),
            tooltip=["sample:N", "bin_lower:Q", "bin_upper:Q", "n:Q"],
        )
    )
    return _spec(bars.properties(width=WIDTH, height=HEIGHT, title=f"{label} histogram, pre vs post"))


def bootstrap(hist: pd.DataFrame, p_text: str, label: str = "LAP") -> dict[str, Any]:
    """Paper Figure III from the binned draws (lookahead.pages.data.bootstrap_histogram):
    the in-sample estimate (red) and the 95th percentile (blue); `label` names the LAP
    measure of the interaction."""
    first = hist.iloc[0]
    est, p95, n = float(first["in_sample_estimate"]), float(first["percentile_95"]), int(first["draws"])
    bars = (
        alt.Chart(alt.Data(values=_records(hist[["lower", "upper", "n"]])))
        .mark_bar(color="#aaaaaa")
        .encode(
            x=alt.X("lower:Q", bin="binned", title=f"bootstrap coefficient on LLM x LAP, standardized ({label}; out-of-sample)"),
            x2="upper:Q",
            y=alt.Y("n:Q", title="draws"),
            tooltip=["lower:Q", "upper:Q", "n:Q"],
        )
    )
    marks = pd.DataFrame([{"x": est, "what": f"in-sample estimate {est:.4g}"}, {"x": p95, "what": f"95th percentile {p95:.4g}"}])
    rules = (
        alt.Chart(alt.Data(values=_records(marks)))
        .mark_rule(strokeWidth=2)
        .encode(x="x:Q", color=alt.Color("what:N", scale=alt.Scale(range=["#c0392b", "#2e86c1"]), title=None), tooltip=["what:N"])
    )
    return _spec(
        alt.layer(bars, rules).properties(width=WIDTH, height=HEIGHT, title=f"Pairs bootstrap, {n:,} draws; one-sided p {p_text}")
    )


def _claim_rows(claims: pd.DataFrame) -> pd.DataFrame:
    c = claims.copy()
    c["shapley"] = pd.to_numeric(c["shapley"], errors="coerce")
    c["tau"] = pd.to_datetime(c.get("tau"), errors="coerce").dt.strftime("%Y-%m-%d")
    c["t_ref"] = pd.to_datetime(c.get("t_ref"), errors="coerce").dt.strftime("%Y-%m-%d")
    c["tau"] = c["tau"].fillna("none stated")
    c["label"] = c["instance_id"].astype(str) + " #" + c["claim_id"].astype(str)
    keep = ["instance_id", "agent", "claim_id", "label", "claim_text", "category", "t_ref", "tau", "leakage_state", "shapley"]
    return c[keep].sort_values(["agent", "instance_id", "claim_id"]).reset_index(drop=True)


#: The claim text an axis label carries after "instance #claim" (the whole text is on hover)
CLAIM_LABEL_CHARS = 48


def _hatch(color: str, pale: str, stripes: int = 60) -> dict[str, Any]:
    """A diagonal hatching as a Vega linear gradient of hard stops: Vega-Lite has no fill
    pattern, and a gradient draws the same in the page's SVG and in vl-convert's PNG. The
    stripes are fractions of the bar, so a longer bar has wider stripes."""
    stops: list[dict[str, Any]] = []
    for i in range(stripes):
        c = color if i % 2 == 0 else pale
        stops += [{"offset": i / stripes, "color": c}, {"offset": (i + 1) / stripes, "color": c}]
    return {"gradient": "linear", "x1": 0, "y1": 0, "x2": 1, "y2": 1, "stops": stops}


def shapley_per_claim(claims: pd.DataFrame, instances: list[str]) -> dict[str, Any]:
    """Shapley value per claim for the named instances (the most leakage-weighted),
    leaked red and hatched (docs/claims.md), not leaked blue, unverifiable grey; each
    label carries the claim's first words, and the page shows its whole text on hover."""
    c = _claim_rows(claims[claims["instance_id"].isin(instances)])
    if c["agent"].nunique() > 1:  # the same instance under two agents: name the agent
        c["label"] = c["label"] + " (" + c["agent"].astype(str) + ")"
    text = c["claim_text"].fillna("").astype(str).str.replace(r"\s+", " ", regex=True).str.strip()
    short = text.where(text.str.len() <= CLAIM_LABEL_CHARS, text.str.slice(0, CLAIM_LABEL_CHARS - 1) + "\u2026")
    c["label"] = c["label"] + ": " + short
    data = alt.Data(values=_records(c))
    y = alt.Y("label:N", sort=None, title=None, axis=alt.Axis(labelLimit=0))
    x = alt.X("shapley:Q", title="Shapley value")
    tooltip = [
        "instance_id:N",
        "agent:N",
        "claim_id:Q",
        "claim_text:N",
        "tau:N",
        "t_ref:N",
        "leakage_state:N",
        alt.Tooltip("shapley:Q", format=".4f"),
    ]
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=y,
            x=x,
            color=alt.Color("leakage_state:N", scale=LEAK_COLORS, title="claim (leaked: hatched)", legend=LEGEND),
            tooltip=tooltip,
        )
    )
    hatched = (
        alt.Chart(data)
        .transform_filter("datum.leakage_state == 'leaked'")
        .mark_bar(fill=_hatch("#c0392b", "#f5b7b1"))
        .encode(y=y, x=x, tooltip=tooltip)
    )
    return _spec(
        alt.layer(bars, hatched).properties(
            width=WIDTH, title=["Shapley value per claim (top instances by Shapley-DCLR)", "rows: instance #claim: claim text"]
        )
    )


def claim_browser(claims: pd.DataFrame) -> dict[str, Any]:
    """Every claim, one row each: instance, agent, date it refers to (tau), the
    instance's reference date, leaked or not, Shapley weight and text; dropdowns filter
    by agent, leaked status and instance."""
    c = _claim_rows(claims)
    agents = ["all", *sorted(c["agent"].astype(str).unique())]
    states = ["all", *[s for s in ("leaked", "not_leaked", "unverifiable") if s in set(c["leakage_state"])]]
    insts = ["all", *sorted(c["instance_id"].astype(str).unique())]
    agent = alt.param(name="agent", value="all", bind=alt.binding_select(options=agents, name="agent "))
    state = alt.param(name="leaked", value="all", bind=alt.binding_select(options=states, name="leaked status "))
    inst = alt.param(name="instance", value="all", bind=alt.binding_select(options=insts, name="instance "))
    base = (
        alt.Chart(alt.Data(values=_records(c)))
        .transform_filter(
            "(agent == 'all' || datum.agent == agent) && (leaked == 'all' || datum.leakage_state == leaked)"
            " && (instance == 'all' || datum.instance_id == instance)"
        )
        .transform_window(row="row_number()")
        .transform_filter("datum.row <= 400")
    )
    y = alt.Y("row:O", axis=None)

    def column(field: str, title: str, width: int) -> alt.Chart:
        return (
            base.mark_text(align="left", baseline="middle")
            .encode(x=alt.value(0), y=y, text=alt.Text(f"{field}:N"), tooltip=["claim_text:N"])
            .properties(width=width, title=alt.TitleParams(title, anchor="start", fontSize=11))
        )

    bars = (
        base.mark_bar()
        .encode(
            y=y,
            x=alt.X("shapley:Q", title="Shapley weight"),
            color=alt.Color("leakage_state:N", scale=LEAK_COLORS, title="claim"),
            tooltip=["label:N", "claim_text:N", alt.Tooltip("shapley:Q", format=".4f")],
        )
        .properties(width=160, title=alt.TitleParams("Shapley", anchor="start", fontSize=11))
    )
    chart = (
        alt.hconcat(
            column("instance_id", "instance", 60),
            column("agent", "agent", 70),
            column("claim_id", "claim", 36),
            column("tau", "claim date", 80),
            column("t_ref", "reference date", 90),
            column("leakage_state", "leaked", 80),
            bars,
            column("claim_text", "claim text", 420),
            spacing=4,
        )
        .add_params(agent, state, inst)
        .configure_view(stroke=None)
        .configure_axis(grid=False)
    )
    spec = chart.to_dict()
    for sub in spec.get("hconcat", []):
        sub.setdefault("height", {"step": 16})
    return spec
