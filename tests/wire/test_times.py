"""Times on the wire: ISO-8601 UTC out, ISO-8601 or epoch seconds in, only times ``iso`` can write."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memproxy.errors import ApiError
from memproxy.wire.times import iso, parse_time

LATEST = "9999-12-31T23:59:59Z"


def test_iso_writes_utc_with_z_and_microseconds() -> None:
    assert iso(None) is None
    assert iso(0) == "1970-01-01T00:00:00.000000Z"
    assert iso(1_700_000_000.25) == "2023-11-14T22:13:20.250000Z"


@pytest.mark.parametrize(
    "value",
    ["2024-03-01T12:00:00Z", "2024-03-01T13:00:00+01:00", "2024-03-01T12:00:00", " 2024-03-01T12:00:00Z "],
)
def test_every_spelling_of_one_instant_is_the_same_seconds(value: str) -> None:
    # An offset is honoured; a naive time is UTC; surrounding blanks are ignored.
    assert parse_time(value) == datetime(2024, 3, 1, 12, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "ts", [0.0, 1.5, 1_700_000_000.123456, datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()]
)
def test_what_iso_writes_parses_back_to_the_same_time(ts: float) -> None:
    written = iso(ts)
    assert written is not None and parse_time(written) == pytest.approx(ts, abs=1e-6)


def test_epoch_seconds_pass_and_none_is_no_time() -> None:
    assert parse_time(None) is None
    assert parse_time(0) == 0.0 and isinstance(parse_time(10), float)
    assert parse_time(1_700_000_000.5) == 1_700_000_000.5
    assert parse_time(LATEST) == datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("yesterday", "invalid_value"),
        ("", "invalid_value"),
        ("2024-13-01", "invalid_value"),
        (True, "invalid_type"),  # a bool is not a number of seconds
        ([2024], "invalid_type"),
        ({"t": 1}, "invalid_type"),
    ],
)
def test_what_is_not_a_time_is_a_400_naming_the_param(value: object, code: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_time(value, "created_at")
    assert (err.value.status, err.value.param, err.value.code) == (400, "created_at", code)


@pytest.mark.parametrize(
    "value",
    [
        -1,
        -0.001,
        "1969-12-31T23:59:59Z",
        253402300800,
        10**400,
        float("inf"),
        float("nan"),
        "9999-12-31T23:59:59-01:00",
    ],
)
def test_a_time_iso_could_not_write_back_is_refused(value: object) -> None:
    with pytest.raises(ApiError) as err:
        parse_time(value)
    assert err.value.status == 400 and err.value.code == "invalid_value" and err.value.param == "expires_at"
