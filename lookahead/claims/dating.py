"""Dating claims and the leakage rule (seed 002, Eq. 1 and Eq. 3).

Eq. 3: A4/A5 are leaked and B1/B2 are not, whatever the corpus says; A1-A3 are leaked
when tau(c) > t_ref. tau(c), the earliest time the claim was knowable, is the earliest
``published_at`` of a corpus document judged to support it. A1-A3 claims end in one of
three states:

* ``leaked``: a supporting document was published after t_ref and none before, or no
  document supports the claim but its own temporal reference lies after t_ref (a claim
  about a later time cannot have been knowable at t_ref);
* ``not_leaked``: a supporting document was published on or before t_ref;
* ``unverifiable``: no supporting document and no temporal reference after t_ref.

Vague temporal references ("2023", "Q3 2023", "March 2023") are read as one date.
The seed contradicts itself: section 4.3 and Appendix A map a period to its END
(strict: "2023" -> 2023-12-31, so a period that contains t_ref counts as after it);
the date-extraction prompt of Appendix D maps a state's period to its START. The
default is ``end`` (the strict reading, which avoids false negatives); setting
``claims_vague_period: start`` selects the other. The choice only matters for an A1-A3
claim with no supporting document whose period contains t_ref.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass

from lookahead.claims.schema import CATEGORY_RULE
from lookahead.config import CHOICES

VAGUE_PERIOD_CHOICES = CHOICES["claims_vague_period"]  # declared in lookahead/study_settings.yml
LEAKAGE_STATES = ("leaked", "not_leaked", "unverifiable")

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MONTHS["sept"] = 9
_MON = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"


@dataclass(frozen=True)
class Period:
    """The span of time a temporal reference names (first and last day)."""

    start: dt.date
    end: dt.date

    def pick(self, vague_period: str) -> dt.date:
        if vague_period not in VAGUE_PERIOD_CHOICES:
            raise ValueError(f"setting 'claims_vague_period': '{vague_period}' is not one of {', '.join(VAGUE_PERIOD_CHOICES)}")
        return self.end if vague_period == "end" else self.start


def _month(y: int, m: int) -> Period:
    return Period(dt.date(y, m, 1), dt.date(y, m, calendar.monthrange(y, m)[1]))


def _span(y1: int, m1: int, y2: int, m2: int) -> Period:
    return Period(_month(y1, m1).start, _month(y2, m2).end)


def parse_period(text: str | None) -> Period | None:
    """The period a temporal reference names, or None when it names none we can read.

    Read: ISO dates (2023-03-15), 'March 15, 2023', '15 March 2023', months ('2023-03',
    'March 2023'), quarters ('Q3 2023', '2023 Q3'), halves ('H1 2023'), years ('2023',
    'FY2023') and seasons ('2018-19', '2018-2019'). Anything else is unparseable and the
    claim is dated by the corpus alone (the bad reference is counted with a reason)."""
    if text is None:
        return None
    s = text.strip().lower().replace(",", " ")
    s = re.sub(r"\s+", " ", s)
    if not s:
        return None
    try:
        if m := re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", s):
            d = dt.date(int(m[1]), int(m[2]), int(m[3]))
            return Period(d, d)
        if m := re.fullmatch(_MON + r" (\d{1,2})(?:st|nd|rd|th)? (\d{4})", s):
            d = dt.date(int(m[3]), _MONTHS[m[1]], int(m[2]))
            return Period(d, d)
        if m := re.fullmatch(r"(\d{1,2})(?:st|nd|rd|th)? " + _MON + r" (\d{4})", s):
            d = dt.date(int(m[3]), _MONTHS[m[2]], int(m[1]))
            return Period(d, d)
        if (m := re.fullmatch(r"(\d{4})-(\d{2})", s)) and 1 <= int(m[2]) <= 12:
            # ISO month wins over a season: "2011-12" is December 2011, "2018-19" a season
            return _month(int(m[1]), int(m[2]))
        if m := re.fullmatch(_MON + r" (\d{4})", s):
            return _month(int(m[2]), _MONTHS[m[1]])
        if m := re.fullmatch(r"q([1-4]) (?:fy)?(\d{4})|(?:fy)?(\d{4}) q([1-4])|q([1-4])-(\d{4})", s):
            q = int(m[1] or m[4] or m[5])
            y = int(m[2] or m[3] or m[6])
            return _span(y, 3 * q - 2, y, 3 * q)
        if m := re.fullmatch(r"h([12]) (\d{4})|(\d{4}) h([12])", s):
            h = int(m[1] or m[4])
            y = int(m[2] or m[3])
            return _span(y, 6 * h - 5, y, 6 * h)
        if m := re.fullmatch(r"(?:fy ?)?(\d{4})", s):
            return _span(int(m[1]), 1, int(m[1]), 12)
        if m := re.fullmatch(r"(\d{4}) ?[-/–] ?(\d{2}|\d{4})", s):
            y1 = int(m[1])
            y2 = int(m[2]) if len(m[2]) == 4 else (y1 // 100) * 100 + int(m[2])
            if y2 < y1:
                y2 += 100
            if y2 - y1 == 1 or len(m[2]) == 4:
                return _span(y1, 1, y2, 12)
    except ValueError:  # 2023-02-30, month 13: not a date
        return None
    return None


@dataclass(frozen=True)
class Leakage:
    """A claim's leakage state, its tau (None when not dated) and why."""

    state: str
    tau: dt.date | None
    reason: str


def claim_leakage(
    category: str, t_ref: dt.date, support_dates: list[dt.date], temporal_reference: str | None, vague_period: str = "end"
) -> Leakage:
    """Eq. 3 with the three states (module docstring)."""
    rule = CATEGORY_RULE.get(category)
    if rule is None:
        raise ValueError(f"category '{category}' is not one of {', '.join(CATEGORY_RULE)}")
    if rule == "leaked":
        return Leakage("leaked", None, f"category {category}: always leaked")
    if rule == "not_leaked":
        return Leakage("not_leaked", None, f"category {category}: never leaked")
    if support_dates:
        tau = min(support_dates)
        state = "leaked" if tau > t_ref else "not_leaked"
        return Leakage(state, tau, f"earliest supporting document {tau.isoformat()}")
    period = parse_period(temporal_reference)
    if period is not None:
        ref = period.pick(vague_period)
        if ref > t_ref:
            return Leakage(
                "leaked",
                ref,
                f"no supporting document; temporal reference '{temporal_reference}' -> {ref.isoformat()} after t_ref",
            )
        return Leakage("unverifiable", None, f"no supporting document; temporal reference '{temporal_reference}' not after t_ref")
    if temporal_reference:
        return Leakage("unverifiable", None, f"no supporting document; temporal reference '{temporal_reference}' unparseable")
    return Leakage("unverifiable", None, "no supporting document; no temporal reference")
