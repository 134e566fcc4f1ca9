"""Seeded generator of the demo study: fictional firms, dated headlines, outcomes.

Why it looks the way it does:
- Every headline carries unique specifics (a person, a product line, a region, a
  figure), because a memorized forecast needs something to key on: templated text
  shared by many rows cannot carry one row's outcome.
- The headline's sentiment is a genuine signal (outcome = entity effect + month effect
  + signal * sentiment + noise), so an honest forecaster has real, modest skill and the
  detection test has to separate skill from memory.
- The realization date is the next trading day after the text date, and the training
  cutoff falls inside the sample so both the pre-cutoff test and the post-cutoff
  placebo are populated.
- A few firms have two headlines on the same day; they share one realization (same
  entity, same target date), so the recall query is deduplicated and merged back
  many-to-one, as in real headline data.
- A known share of pre-cutoff realizations is "memorized": the training corpus of the
  contaminated model will contain their outcomes (see ``corpus``).

Everything follows from ``DemoSpec.seed``: the same seed gives byte-identical files.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

STEMS_A = (
    "Ar",
    "Bel",
    "Cor",
    "Dal",
    "Ev",
    "Fal",
    "Gar",
    "Hal",
    "Is",
    "Jor",
    "Kel",
    "Lum",
    "Mor",
    "Nor",
    "Or",
    "Pel",
    "Quin",
    "Ros",
    "Sar",
    "Tal",
    "Ul",
    "Ver",
    "Wes",
    "Zan",
)
STEMS_B = (
    "vana",
    "mora",
    "dex",
    "tria",
    "lonix",
    "quist",
    "beth",
    "vane",
    "cora",
    "tosa",
    "rind",
    "mark",
    "ova",
    "nity",
    "bris",
    "gen",
    "lith",
    "ward",
    "sona",
    "mere",
)
SECTORS = (
    "Biotech",
    "Systems",
    "Foods",
    "Energy",
    "Logistics",
    "Motors",
    "Pharma",
    "Materials",
    "Networks",
    "Retail",
    "Robotics",
    "Holdings",
    "Minerals",
    "Software",
)
FIRST_NAMES = (
    "Alice",
    "Bruno",
    "Carla",
    "Dmitri",
    "Elena",
    "Farid",
    "Greta",
    "Hiro",
    "Ingrid",
    "Jonas",
    "Keiko",
    "Luis",
    "Maya",
    "Nikhil",
    "Olga",
    "Pavel",
    "Rosa",
    "Samir",
    "Tessa",
    "Umar",
    "Vera",
    "Wen",
    "Yara",
    "Zoltan",
)
LAST_NAMES = (
    "Abbott",
    "Brandt",
    "Castillo",
    "Dorsey",
    "Eriksen",
    "Fontaine",
    "Gallo",
    "Haddad",
    "Iverson",
    "Jensen",
    "Kowalski",
    "Lindqvist",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quaid",
    "Romano",
    "Sandoval",
    "Takahashi",
    "Ulrich",
    "Vance",
    "Whitaker",
    "Zhou",
)
PRODUCTS = (
    "battery",
    "cloud",
    "freight",
    "vaccine",
    "sensor",
    "chip",
    "fertilizer",
    "turbine",
    "payments",
    "drone",
    "cement",
    "satellite",
    "insulin",
    "router",
    "solar",
    "lithium",
    "robot",
    "snack",
    "tire",
    "pipeline",
)
REGIONS = (
    "Ohio",
    "Texas",
    "Bavaria",
    "Ontario",
    "Kyushu",
    "Lombardy",
    "Queensland",
    "Chile",
    "Norway",
    "Gujarat",
    "Alberta",
    "Catalonia",
    "Jutland",
    "Sonora",
    "Brittany",
    "Wales",
    "Tasmania",
    "Yukon",
    "Hokkaido",
    "Flanders",
)

# Sentiment templates. The sentiment words (jumped, beats, raises ... slumped, misses,
# cuts ...) are the genuine signal; the braces are the row's unique specifics.
POSITIVE_TEMPLATES = (
    "{person} says {product} orders jumped {pct}% as {short} beats estimates in {region}",
    "{short} raises outlook after {product} sales climb {pct}% in {region}, chief executive {person} says",
    "{short} wins {amount} million {product} contract in {region}; {person} cites strong demand",
    "analysts upgrade {short} after {product} margins improve {pct}%, finance chief {person} says",
    "{short} posts record {product} revenue, up {pct}% in {region}; {person} upbeat on growth",
    "{short} gains approval for {product} in {region}, {person} expects {pct}% boost to profit",
)
NEGATIVE_TEMPLATES = (
    "{person} warns {product} orders slumped {pct}% as {short} misses estimates in {region}",
    "{short} cuts outlook after {product} sales drop {pct}% in {region}, chief executive {person} says",
    "{short} loses {amount} million {product} contract in {region}; {person} cites weak demand",
    "analysts downgrade {short} after {product} margins shrink {pct}%, finance chief {person} says",
    "{short} posts {product} revenue decline of {pct}% in {region}; {person} cautious on growth",
    "{short} recalls {product} units in {region}, {person} expects {pct}% hit to profit",
)


@dataclass(frozen=True)
class DemoSpec:
    """Parameters of one demo scenario; the defaults are the shipped demo."""

    seed: int = 20240611
    n_entities: int = 30
    obs_per_entity: int = 20
    start: str = "2021-07-01"
    end: str = "2022-06-30"
    training_cutoff: str = "2021-12-31"
    memorized_share: float = 0.4  # share of pre-cutoff (entity, target_date) memorized
    same_day_share: float = 0.04  # share of events with a second headline that day
    signal: float = 0.6  # outcome points per unit of headline sentiment
    noise_sd: float = 1.5
    entity_sd: float = 0.3
    period_sd: float = 0.4
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class DemoData:
    """The generated study: the user-facing input rows and the hidden truth."""

    spec: DemoSpec
    observations: pd.DataFrame  # protocol input format
    truth: pd.DataFrame  # row_id -> sentiment, memorized, clean recall direction, ...


def trading_days(start: dt.date, end: dt.date) -> list[dt.date]:
    """Weekdays in [start, end]; the demo's trading calendar has no holidays."""
    days, d = [], start
    while d <= end:
        if d.weekday() < 5:
            days.append(d)
        d += dt.timedelta(days=1)
    return days


def next_trading_day(d: dt.date) -> dt.date:
    d += dt.timedelta(days=1)
    while d.weekday() >= 5:
        d += dt.timedelta(days=1)
    return d


def make_entities(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Fictional firms with unique two-word names and unique 4-letter tickers."""
    if n > len(STEMS_A) * len(STEMS_B):
        raise ValueError(f"n_entities={n} exceeds the {len(STEMS_A) * len(STEMS_B)} available names")
    stems: list[str] = []
    seen: set[str] = set()
    while len(stems) < n:
        s = STEMS_A[rng.integers(len(STEMS_A))] + STEMS_B[rng.integers(len(STEMS_B))]
        if s not in seen:
            seen.add(s)
            stems.append(s)
    rows, tickers = [], set()
    for i, stem in enumerate(stems):
        sector = SECTORS[rng.integers(len(SECTORS))]
        base = (stem[:3] + sector[0]).upper()
        ticker, k = base, 0
        while ticker in tickers:
            k += 1
            ticker = (stem[:2] + sector[0] + chr(ord("A") + (k - 1) % 26)).upper()
        tickers.add(ticker)
        rows.append({"entity_id": f"E{i + 1:02d}", "entity_name": f"{stem} {sector}", "short": stem, "ticker": ticker})
    return pd.DataFrame(rows)


def _headline(rng: np.random.Generator, sentiment: int, short: str) -> str:
    templates = POSITIVE_TEMPLATES if sentiment > 0 else NEGATIVE_TEMPLATES
    t = templates[rng.integers(len(templates))]
    person = f"{FIRST_NAMES[rng.integers(len(FIRST_NAMES))]} {LAST_NAMES[rng.integers(len(LAST_NAMES))]}"
    return t.format(
        person=person,
        product=PRODUCTS[rng.integers(len(PRODUCTS))],
        region=REGIONS[rng.integers(len(REGIONS))],
        pct=f"{rng.integers(2, 40)}.{rng.integers(0, 10)}",
        amount=int(rng.integers(5, 900)),
        short=short,
    )


def generate(spec: DemoSpec = DemoSpec()) -> DemoData:
    """Draw one demo scenario from ``spec.seed`` (deterministic)."""
    rng = np.random.default_rng(spec.seed)
    start, end = dt.date.fromisoformat(spec.start), dt.date.fromisoformat(spec.end)
    cutoff = dt.date.fromisoformat(spec.training_cutoff)
    if not start < cutoff < end:
        raise ValueError(f"training_cutoff {cutoff} must lie strictly inside [{start}, {end}]")
    days = trading_days(start, end)[:-1]  # the last day's next trading day may fall outside
    if spec.obs_per_entity > len(days):
        raise ValueError(f"obs_per_entity={spec.obs_per_entity} exceeds {len(days)} trading days")

    entities = make_entities(rng, spec.n_entities)
    entity_eff = rng.normal(0.0, spec.entity_sd, spec.n_entities)
    months = sorted({(d.year, d.month) for d in days} | {(end.year, end.month)})
    month_eff = dict(zip(months, rng.normal(0.0, spec.period_sd, len(months)), strict=False))

    rows, texts = [], set()
    for e_idx, ent in entities.iterrows():
        picks = np.sort(rng.choice(len(days), size=spec.obs_per_entity, replace=False))
        for p in picks:
            text_date = days[p]
            target_date = next_trading_day(text_date)
            n_heads = 2 if rng.random() < spec.same_day_share else 1
            sentiments = [int(rng.choice((-1, 1))) for _ in range(n_heads)]
            outcome = (
                entity_eff[e_idx]
                + month_eff[(target_date.year, target_date.month)]
                + spec.signal * float(np.mean(sentiments))
                + rng.normal(0.0, spec.noise_sd)
            )
            for s in sentiments:
                text = _headline(rng, s, ent["short"])
                while text in texts:  # unique specifics on every row
                    text = _headline(rng, s, ent["short"])
                texts.add(text)
                rows.append(
                    {
                        "entity_id": ent["entity_id"],
                        "entity_name": ent["entity_name"],
                        "ticker": ent["ticker"],
                        "text": text,
                        "text_date": text_date.isoformat(),
                        "target_date": target_date.isoformat(),
                        "outcome": round(float(outcome), 4),
                        "sentiment": s,
                    }
                )
    df = pd.DataFrame(rows)
    df.insert(0, "row_id", [f"R{i + 1:05d}" for i in range(len(df))])
    df["sample"] = np.where(pd.to_datetime(df["target_date"]).dt.date <= cutoff, "pre", "post")
    df["realized_direction"] = np.where(df["outcome"] > 0, "up", "down")

    # Memorized subset: whole (entity, target_date) realizations before the cutoff.
    events = (
        df.loc[df["sample"] == "pre", ["entity_id", "target_date"]]
        .drop_duplicates()
        .sort_values(["entity_id", "target_date"])
        .to_numpy()
        .tolist()
    )
    n_mem = int(round(spec.memorized_share * len(events)))
    mem_idx = rng.choice(len(events), size=n_mem, replace=False)
    memorized = {tuple(events[i]) for i in mem_idx}
    df["memorized"] = [(e, t) in memorized for e, t in zip(df["entity_id"], df["target_date"], strict=False)]
    # The clean control is just as confident on the same realizations, but its
    # direction is a coin flip drawn independently of the outcome.
    coin = {ev: ("up" if rng.random() < 0.5 else "down") for ev in sorted(memorized)}
    df["clean_recall_direction"] = [coin.get((e, t), "unknown") for e, t in zip(df["entity_id"], df["target_date"], strict=False)]
    df["seed"] = spec.seed

    obs_cols = ["row_id", "entity_id", "entity_name", "ticker", "text", "text_date", "target_date", "outcome"]
    truth_cols = [
        "row_id",
        "entity_id",
        "target_date",
        "sample",
        "sentiment",
        "outcome",
        "realized_direction",
        "memorized",
        "clean_recall_direction",
        "seed",
    ]
    return DemoData(spec=spec, observations=df[obs_cols].copy(), truth=df[truth_cols].copy())
