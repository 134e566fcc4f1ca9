"""Rendered tables, figures, the dbt entry points and the REPORT.md section."""

from __future__ import annotations

from pathlib import Path

import duckdb
import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from lookahead.pages.paper import bootstrap_figure, database_tables, measure_label, paper_markdown
from lookahead.paper import analysis as A
from lookahead.paper import dbt_entry, figures, render
from lookahead.paper import tables as T
from lookahead.paper.synthetic import make_panel


@pytest.fixture(scope="module")
def panels():
    pre = make_panel(n_rows=800, n_entities=80, n_dates=30, delta=3.0, seed=31, sample="pre")
    post = make_panel(n_rows=600, n_entities=70, n_dates=25, delta=0.0, seed=32)
    return pre, post


def _settings_frame(**kw) -> pd.DataFrame:
    """A study_settings table as dbt writes it (its settings_json is the study)."""
    from lookahead.config import load_study

    study = load_study(
        overrides={
            "lap_measure": "mink",
            "cluster": "entity",
            "paper_cluster": "date",
            "bootstrap_draws": 50,
            "bootstrap_seed": 11,
            **kw,
        }
    )
    return pd.DataFrame({"settings_json": [study.settings_json()]})


def test_stars_and_number_format():
    assert [render.stars(p) for p in (0.001, 0.02, 0.07, 0.2, float("nan"))] == ["***", "**", "*", "", ""]
    assert render.fmt_coef(0.2101) == "0.210" and render.fmt_coef(0.00117) == "0.00117"
    assert render.fmt_coef(-1.2974) == "-1.297" and render.fmt_coef(0.053) == "0.0530"


def test_markdown_and_latex_tables(panels):
    pre, _ = panels
    s = T.PaperSections.with_defaults(lap_measure="mink")
    tab = T.table2(pre, s)
    long = tab.long(s)
    md = render.markdown_table(long, "table2", "Table II", notes=tab.notes)
    fit = tab.columns[1]
    b, t = fit.estimate["LLM x LAP"], fit.t["LLM x LAP"]
    assert f"| LLM x LAP |  | {render.fmt_coef(b)}{render.stars(fit.p['LLM x LAP'])} |" in md
    assert f"({t:.2f})" in md
    assert "| Entity FE | Yes | Yes |" in md and "| Period FE | Yes | Yes |" in md
    assert f"| N | {tab.columns[0].n_obs:,} | {fit.n_obs:,} |" in md
    assert f"| R2 | {tab.columns[0].r2:.3f} | {fit.r2:.3f} |" in md
    tex = render.latex_table(long, "table2", "Table II: 5% & more_stuff", notes=["a_b"])
    assert r"LLM $\times$ LAP" in tex and r"\%" in tex and r"\&" in tex and r"more\_stuff" in tex
    assert r"$^{***}$" in tex or r"$^{**}$" in tex
    assert tex.count(r"\begin{tabular}") == 1 and r"\bottomrule" in tex


def test_figures_are_real_pngs(panels, tmp_path):
    pre, post = panels
    rng = np.random.default_rng(0)
    draws = rng.normal(0, 0.01, 2000)
    p = figures.bootstrap_figure(draws, 0.03, tmp_path / "boot.png", p_value=0.001)
    img = mpimg.imread(p)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300
    rgb = img[..., :3]
    red = (rgb[..., 0] > 0.9) & (rgb[..., 1] < 0.2) & (rgb[..., 2] < 0.2)
    blue = (rgb[..., 2] > 0.9) & (rgb[..., 0] < 0.2) & (rgb[..., 1] < 0.2)
    assert red.sum() > 100 and blue.sum() > 50  # in-sample line and 95th percentile line
    for f in (
        figures.lap_histograms(pre, post, "lap_mink", tmp_path / "h.png"),
        figures.accuracy_figure(pre, post, "lap_mink", tmp_path / "a.png"),
    ):
        im = mpimg.imread(f)
        assert im[..., :3].std() > 0.05  # not a blank canvas
    acc = figures.accuracy_by_decile(pre, "lap_mink")
    assert list(acc["decile"]) == list(range(1, 11)) and acc["n"].sum() > 0


def test_dbt_entry_frames(panels):
    pre, post = panels
    st = _settings_frame()
    boot = dbt_entry.bootstrap_frame(st, pre, post)
    assert len(boot) == 50 and boot["seed"].eq(11).all()
    assert boot["p_value"].iloc[0] == pytest.approx(np.mean(boot["coefficient"] >= boot["in_sample_estimate"]))
    long = dbt_entry.paper_tables_frame(st, pre, post, boot)
    assert list(long.columns) == [*A.LONG_COLUMNS, "kind"]
    assert set(long["kind"]) == {"coefficient", "magnitude", "bootstrap", "difference", "note"}
    coef = long[long["kind"] == "coefficient"]
    assert set(coef["paper_table"]) == {"table2", "table4", "table5"}  # no moderator: no table3
    assert coef["vcov"].eq("CRV1 by date").all()
    assert long.loc[long["kind"] == "note", "note"].str.contains("Table III skipped").any()
    # Table V col 2 estimate is the bootstrap's in-sample estimate
    t5 = coef[(coef["paper_table"] == "table5") & (coef["table_column"] == 2) & (coef["term"] == T.INTERACTION_STD)]
    assert float(t5["estimate"].iloc[0]) == pytest.approx(float(boot["in_sample_estimate"].iloc[0]))
    # no post sample: empty bootstrap with typed columns, Table V skipped
    empty = dbt_entry.bootstrap_frame(st, pre, post.iloc[:0])
    assert len(empty) == 0 and list(empty.columns) == list(dbt_entry.BOOTSTRAP_COLUMNS)


def test_settings_errors_come_from_the_one_settings_loader():
    from lookahead.config import StudyConfigError

    with pytest.raises(StudyConfigError, match="setting 'bootstrap_draws': -1 is below its minimum"):
        _settings_frame(bootstrap_draws=-1)
    with pytest.raises(StudyConfigError, match="setting 'paper_cluster': 'firm' is not one of"):
        _settings_frame(paper_cluster="firm")
    s, draws, seed = dbt_entry.settings_from_frame(_settings_frame(paper_cluster="entity"))
    assert (s.paper.paper_cluster, s.measures.lap_measure, draws, seed) == ("entity", "mink", 50, 11)


def test_report_section_from_duckdb(panels, tmp_path):
    pre, post = panels
    st = _settings_frame(moderator_column="small", extra_columns=["small"])
    con, _, _ = _paper_database(pre, post, st)
    md = paper_markdown(database_tables(con), tmp_path)
    for t in (
        "Table I.",
        "Table II.",
        "Table III.",
        "Table IV.",
        "Table V.",
        "OOS bootstrap p-value",
        "figures/bootstrap.png",
        "figures/lap_hist.png",
        "figures/accuracy_by_lap_decile.png",
    ):
        assert t in md, t
    for f in ("table1_pre.tex", "table1_post.tex", "table2.tex", "table3.tex", "table4.tex", "table5.tex"):
        assert (tmp_path / "tables" / f).exists(), f
    assert (tmp_path / "figures" / "bootstrap.png").stat().st_size > 10_000
    # a database without the paper's models: no tables read, no section
    assert database_tables(duckdb.connect()) == {} and paper_markdown({}, tmp_path / "none") == ""


def test_table5_bootstrap_p_is_one_number_everywhere(panels, tmp_path):
    """Table V's bootstrap p prints as the reading beside the verdict prints it (fmt_p),
    and the HTML page's Figure III names the same p."""
    from lookahead.pages.report import bootstrap_histogram, write_csv
    from lookahead.paper.table5_reading import reading_frame, table5_reading
    from lookahead.stats.verdict import fmt_p

    pre, post = panels
    st = _settings_frame(moderator_column="small", extra_columns=["small"])
    con, boot, long = _paper_database(pre, post, st)
    write_csv(bootstrap_histogram(boot), tmp_path, "bootstrap_histogram")
    p = float(long.loc[long["kind"] == "bootstrap", "p"].iloc[0])
    md = paper_markdown(database_tables(con), tmp_path)
    row = next(line for line in md.splitlines() if "OOS bootstrap p-value" in line)
    b = int(boot["coefficient"].notna().sum())
    assert f"[{fmt_p(p, b)}]" in row
    assert f"Its bootstrap p ({fmt_p(p, b)})" in table5_reading(reading_frame(long, b).iloc[0])
    fig = bootstrap_figure(tmp_path)
    assert fig.spec["title"].endswith(f"one-sided p {fmt_p(p, len(boot))}")
    # the page's Figure III names the measure the paper's tables ran on, as their captions
    label = measure_label(database_tables(con))
    assert label.startswith("Min-K%") and f"({label})" in md
    fig = bootstrap_figure(tmp_path, label)
    assert label in fig.title and label in fig.spec["layer"][0]["encoding"]["x"]["title"]


def _paper_database(
    pre: pd.DataFrame, post: pd.DataFrame, st: pd.DataFrame
) -> tuple[duckdb.DuckDBPyConnection, pd.DataFrame, pd.DataFrame]:
    """An in-memory database holding what the paper section reads, computed from these
    frames by the paper's dbt entry points; with the bootstrap and the long tables."""
    boot = dbt_entry.bootstrap_frame(st, pre, post)
    long = dbt_entry.paper_tables_frame(st, pre, post, boot)
    con = duckdb.connect()
    for name, df in (
        ("paper_tables", long),
        ("bootstrap_results", boot),
        ("panel_pre", pre),
        ("panel_post", post),
        ("study_settings", st),
    ):
        con.register(f"{name}_df", df)
        con.execute(f"create table {name} as select * from {name}_df")
    return con, boot, long


def _section(pre: pd.DataFrame, post: pd.DataFrame, st: pd.DataFrame, tmp_path) -> str:
    """The paper section's Markdown from a database built of these frames."""
    con, _, _ = _paper_database(pre, post, st)
    return paper_markdown(database_tables(con), tmp_path)


def test_the_section_names_the_tables_it_prints_and_why_others_are_absent(panels, tmp_path):
    """The heading lists the paper's tables the study prints; the first line names each
    absent one with its reason (README: which of the six, and why)."""
    pre, post = panels
    md = _section(pre, post, _settings_frame(), tmp_path / "a")
    assert "## Paper analysis (Tables I, II, IV, V, Figure III)" in md
    line = next(x for x in md.splitlines() if x.startswith("**Which of the paper's six tables"))
    assert "Printed: I, II, IV, V." in line
    assert "III (needs a binary `moderator_column`; the note below says" in line
    assert "VI (needs a five-level forecast" in line and "not five-level" in line
    assert "Table VI." not in md and "Table III." not in md
    # a five-level forecast and a moderator: all six
    levels = dict(zip(("sd", "d", "n", "u", "su"), T.FIVE_LEVEL_VALUES, strict=True))
    five = make_panel(n_rows=800, n_entities=80, n_dates=30, delta=3.0, seed=31, sample="pre", labels=levels)
    assert set(five["mu_hat"].unique()) >= {-0.5, 0.5}
    md = _section(five, post, _settings_frame(moderator_column="small", extra_columns=["small"]), tmp_path / "b")
    assert "## Paper analysis (Tables I, II, III, IV, V, VI, Figure III)" in md
    assert "Printed: I, II, III, IV, V, VI." in md and "Not printed" not in md
    assert "Table VI." in md


def test_paper_figures_keep_legends_off_the_data_and_name_measure_and_deciles(panels, tmp_path, monkeypatch):
    """Figure III, the LAP histogram and the accuracy figure draw their legends right of the
    axes, never over the bars (Figure III's covered the histogram's peak); the accuracy
    figure names its measure and its decile rule, and marks post apart from pre."""
    pre, post = panels
    seen: dict[str, object] = {}
    save = figures._save

    def keep(fig, path):
        fig.canvas.draw()
        ax = fig.axes[0]
        r = fig.canvas.get_renderer()
        seen[Path(path).stem] = (
            ax.get_legend().get_window_extent(r),
            ax.get_window_extent(r),
            ax.get_title(),
            ax.get_xlabel(),
            [line.get_marker() for line in ax.get_lines() if line.get_label().endswith("cutoff")],
        )
        return save(fig, path)

    monkeypatch.setattr(figures, "_save", keep)
    figures.lap_histograms(pre, post, "lap", tmp_path / "h.png", "Min-K% LAP")
    figures.accuracy_figure(pre, post, "lap", tmp_path / "a.png", label="Min-K% LAP")
    figures.bootstrap_figure(np.random.default_rng(0).normal(size=500), 0.1, tmp_path / "b.png", 0.002)
    assert set(seen) == {"h", "a", "b"}
    for name, (legend, axes, *_) in seen.items():
        assert legend.x0 >= axes.x1, name  # wholly right of the plotting area
    _, _, title, xlabel, markers = seen["a"]
    assert "Min-K% LAP" in title and figures.DECILE_RULE in xlabel
    assert len(set(markers)) == 2
