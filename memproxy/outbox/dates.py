"""Relative dates in memory texts, resolved against the date of the turn that said them.

A memory outlives the day it was said: "next Friday" read a month later names the wrong
day. The prompt gives the model each new message's date and asks for absolute dates; this
module is the deterministic back-stop for the phrases models keep anyway (the recorded
small models stored "Next Friday I'm flying to Tokyo" as is).

Invariants:
- Pure: ``resolve(text, turns)`` depends only on its arguments. The reference date is the
  capture date (UTC) of the latest new turn that contains the phrase, else of the latest
  turn: a batch can hold turns of different days, and "tomorrow" means the day after the
  turn that said it, not after the day the worker ran.
- Only unambiguous phrases are rewritten; recurring ones ("every Tuesday") are untouched.
- "next <weekday>" means the first such day *after* the turn's date (on a Monday, "next
  Friday" is four days later), "this <weekday>" the first on or after it, "last <weekday>"
  the latest one before it. Dates are UTC days (the user's time zone is not known).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")  # fmt: skip
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "a": 1, "an": 1}

Turn = tuple[float, str]  # (captured at, epoch seconds; the turn's text)


def day_of(ts: float) -> date:
    return datetime.fromtimestamp(ts, UTC).date()


def _on(day: date) -> str:
    return f"on {day.isoformat()} ({WEEKDAYS[day.weekday()].capitalize()})"


def _month(day: date, delta: int) -> str:
    index = day.year * 12 + day.month - 1 + delta
    return f"in {MONTHS[index % 12]} {index // 12}"


def _weekday(day: date, name: str, direction: str) -> str:
    target = WEEKDAYS.index(name.lower())
    if direction == "last":
        return _on(day - timedelta(days=(day.weekday() - target - 1) % 7 + 1))
    if direction == "this":
        return _on(day + timedelta(days=(target - day.weekday()) % 7))
    return _on(day + timedelta(days=(target - day.weekday() - 1) % 7 + 1))


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.lower()]


def _shift(day: date, amount: int, unit: str) -> str:
    days = amount * (7 if unit.lower().startswith("week") else 1)
    return _on(day + timedelta(days=days))


def _relative_week(m: re.Match[str], d: date) -> str:
    monday = d - timedelta(days=d.weekday())
    return "the week of " + (monday + timedelta(weeks=_STEP.get(m[1].lower(), 0))).isoformat()


def _relative_month(m: re.Match[str], d: date) -> str:
    return _month(d, _STEP.get(m[1].lower(), 0))


def _relative_year(m: re.Match[str], d: date) -> str:
    return f"in {d.year + _STEP.get(m[1].lower(), 0)}"


def _days(offset: int) -> Callable[[re.Match[str], date], str]:
    return lambda m, d: _on(d + timedelta(days=offset))


_STEP = {"next": 1, "last": -1}
_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_N = r"(\d{1,3}|one|two|three|four|five|six|seven|a|an)"
# (pattern, rewrite(match, reference day)), most specific first.
_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str], date], str]]] = [
    (re.compile(r"\bthe day after tomorrow\b", re.I), _days(2)),
    (re.compile(r"\bthe day before yesterday\b", re.I), _days(-2)),
    (
        re.compile(r"\b(?:on\s+)?(next|this|coming|last)\s+(" + _DAY + r")\b", re.I),
        lambda m, d: _weekday(d, m[2], m[1].lower()),
    ),
    (re.compile(r"\btomorrow\b", re.I), _days(1)),
    (re.compile(r"\byesterday\b", re.I), _days(-1)),
    (re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b", re.I), _days(0)),
    (re.compile(r"\bin " + _N + r" (days?|weeks?)\b", re.I), lambda m, d: _shift(d, _count(m[1]), m[2])),
    (re.compile(r"\b" + _N + r" (days?|weeks?) ago\b", re.I), lambda m, d: _shift(d, -_count(m[1]), m[2])),
    (re.compile(r"(?<!the )\b(next|last|this) week\b", re.I), _relative_week),
    (re.compile(r"(?<!the )\b(next|last|this) month\b", re.I), _relative_month),
    (re.compile(r"(?<!the )\b(next|last|this) year\b", re.I), _relative_year),
]


def _reference(phrase: str, turns: Sequence[Turn]) -> date:
    mentioning = [ts for ts, text in turns if phrase.casefold() in text.casefold()]
    return day_of(max(mentioning) if mentioning else max(ts for ts, _ in turns))


def _phrase_core(matched: str) -> str:
    return re.sub(r"^on\s+", "", matched, flags=re.I)


def resolve(text: str, turns: Sequence[Turn]) -> str:
    """``text`` with its relative dates made absolute (see the module doc)."""
    if not turns:
        return text
    for pattern, rewrite in _RULES:

        def replace(m: re.Match[str], rewrite: Callable[[re.Match[str], date], str] = rewrite) -> str:
            new = rewrite(m, _reference(_phrase_core(m.group()), turns))
            return new[0].upper() + new[1:] if m.group()[0].isupper() else new

        text = pattern.sub(replace, text)
    return text
