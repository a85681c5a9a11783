"""Relative dates resolved against the date of the turn that said them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memproxy.outbox.dates import resolve

MONDAY = datetime(2026, 11, 30, 10, tzinfo=UTC).timestamp()  # the recorded samples' "today"
TURN = [(MONDAY, "Next Friday I'm flying to Tokyo with my sister Inês for a week.")]


@pytest.mark.parametrize(
    ("text", "resolved"),
    [
        ("Next Friday I'm flying to Tokyo with my sister Inês for a week.",  # recorded, stored as is
         "On 2026-12-04 (Friday) I'm flying to Tokyo with my sister Inês for a week."),
        ("User is flying to Tokyo on next Friday", "User is flying to Tokyo on 2026-12-04 (Friday)"),
        ("User flies this Monday", "User flies on 2026-11-30 (Monday)"),
        ("User was in Rome last Friday", "User was in Rome on 2026-11-27 (Friday)"),
        ("User moved to Porto last month", "User moved to Porto in October 2026"),
        ("User has a dentist appointment tomorrow", "User has a dentist appointment on 2026-12-01 (Tuesday)"),
        ("User got a dog 3 days ago", "User got a dog on 2026-11-27 (Friday)"),
        ("User starts a new job in two weeks", "User starts a new job on 2026-12-14 (Monday)"),
        ("User travels next week", "User travels the week of 2026-12-07"),
        ("User married last year", "User married in 2025"),
        ("User plays the cello every Tuesday evening", "User plays the cello every Tuesday evening"),
        ("User's birthday is March 14", "User's birthday is March 14"),
    ],
)  # fmt: skip
def test_common_phrases_become_absolute(text: str, resolved: str) -> None:
    assert resolve(text, TURN) == resolved


def test_the_reference_is_the_turn_that_said_it_not_the_latest() -> None:
    earlier = MONDAY - 3 * 86400  # Friday 2026-11-27
    turns = [(earlier, "Tomorrow I have a dentist appointment"), (MONDAY, "ok, thanks")]
    assert resolve("User has a dentist appointment tomorrow", turns) == (
        "User has a dentist appointment on 2026-11-28 (Saturday)"
    )
    assert resolve("User is busy today", turns) == "User is busy on 2026-11-30 (Monday)"  # no turn says it
    assert resolve("User is busy today", []) == "User is busy today"
