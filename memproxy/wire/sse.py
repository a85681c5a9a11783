"""Server-sent events as every API surface streams them: the frame format, and the pieces a
provider's stream is cut into before the one relay loop (``api.stream_relay``) sends them on.

Chat completions and legacy completions stream ``data: {json}`` lines ended by ``data: [DONE]``;
the Responses API and Anthropic's Messages API stream typed events (``event: <type>`` + ``data:``).

Invariants:
- A ``Piece`` holds whole events only, so a client never sees half an event and a failure after
  the first byte can always be reported as one final error event.
- ``Piece.raw`` is what the client gets, byte for byte; ``Piece.events`` is what capture reads
  (parsed dicts, or the raw ``data:`` payloads, parsed only when capture wants them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DONE = b"[DONE]"
DONE_FRAME = b"data: [DONE]\n\n"
_SEPARATORS = (b"\n\n", b"\r\n\r\n", b"\r\r")


@dataclass(slots=True)
class Piece:
    """Whole events to send (``raw``) and what capture reads of them (``events``).

    ``final``: ``raw`` starts with the surface's final event (chat's ``[DONE]``, the Responses
    API's ``response.completed``, Anthropic's ``message_stop``), which goes out only once the
    turn is captured."""

    raw: bytes
    events: list[dict[str, Any]] | list[bytes]
    final: bool = False


def data_frame(data: dict[str, Any]) -> bytes:
    """``data: {json}``: chat's (and legacy completions') event."""
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def typed_frame(event: dict[str, Any]) -> bytes:
    """``event: <type>`` + ``data: {json}``: the Responses and Messages APIs' event."""
    return f"event: {event.get('type', 'message')}\ndata: {json.dumps(event)}\n\n".encode()


def json_object(payload: bytes) -> dict[str, Any] | None:
    """``payload`` as a JSON object, or None (not JSON, or not an object)."""
    try:
        value = json.loads(payload)
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def split_events(buffer: bytes) -> int:
    """Length of the complete events at the start of ``buffer`` (up to the last blank line)."""
    ends = [buffer.rfind(sep) + len(sep) for sep in _SEPARATORS if sep in buffer]
    return max(ends, default=0)


def data_lines(events: bytes) -> list[tuple[int, bytes]]:
    """``(offset, payload)`` of every ``data:`` line in ``events``, in order."""
    found: list[tuple[int, bytes]] = []
    offset = 0
    for line in events.splitlines(keepends=True):
        if line.startswith(b"data:"):
            found.append((offset, line[5:].strip()))
        offset += len(line)
    return found


def event_start(events: bytes, offset: int) -> int:
    """Where the event holding byte ``offset`` of ``events`` begins (after the blank line before it)."""
    found = [(events.rfind(sep, 0, offset), sep) for sep in _SEPARATORS]
    return max((at + len(sep) for at, sep in found if at >= 0), default=0)


def is_done(payload: bytes) -> bool:
    """Chat's end of stream: the ``data: [DONE]`` line."""
    return payload == DONE


class SSEParser:
    """Splits a byte stream into complete SSE frames and parses each frame's ``data:`` JSON."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, dict[str, Any]]]:
        # Normalised on the whole buffer: a CRLF may be split between two chunks.
        self._buffer = (self._buffer + chunk).replace(b"\r\n", b"\n")
        frames: list[tuple[bytes, dict[str, Any]]] = []
        while b"\n\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            frames.append((raw + b"\n\n", _data_of(raw)))
        return frames


def _data_of(raw: bytes) -> dict[str, Any]:
    data = b"\n".join(line[5:].lstrip() for line in raw.split(b"\n") if line.startswith(b"data:"))
    return (json_object(data) or {}) if data else {}
