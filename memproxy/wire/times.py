"""Times on the wire: epoch seconds inside, ISO-8601 UTC (``Z``) outside."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from memproxy.errors import ApiError

# The times ``iso`` can write back out (1970-01-01 … 9999-12-31): a stored time beyond them
# would make every later read of the row fail, so they are refused when they come in.
_LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: object, param: str = "expires_at") -> float | None:
    """ISO-8601 string (``Z`` or offset; naive means UTC) or epoch seconds → epoch seconds."""
    if value is None:
        return None
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf  # an int past float's range
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            seconds = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    if seconds is None:
        code = "invalid_value" if isinstance(value, str) else "invalid_type"
        raise ApiError(400, f"{param} must be an ISO-8601 time or epoch seconds", param=param, code=code)
    if not 0 <= seconds <= _LATEST:
        raise ApiError(400, f"{param} must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z",
                       param=param, code="invalid_value")  # fmt: skip
    return seconds
