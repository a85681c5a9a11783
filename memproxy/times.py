"""Times on the wire: epoch seconds inside, ISO-8601 UTC (``Z``) outside."""

from __future__ import annotations

from datetime import UTC, datetime

from memproxy.errors import ApiError


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: object, param: str = "expires_at") -> float | None:
    """ISO-8601 string (``Z`` or offset; naive means UTC) or epoch seconds → epoch seconds."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ApiError(400, f"{param} must be an ISO-8601 time or epoch seconds", param=param)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    raise ApiError(400, f"{param} must be an ISO-8601 time or epoch seconds", param=param)
