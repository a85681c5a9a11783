"""Server-sent event frames: writing them, cutting a byte stream into whole events, reading them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memproxy.wire.sse import (
    DONE_FRAME,
    SSEParser,
    data_frame,
    data_lines,
    event_start,
    is_done,
    json_object,
    split_events,
    typed_frame,
)

EVENTS: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"id": "msg_1", "content": []}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "héllo\n\nworld"}},
    {"type": "message_stop"},
]


def test_frames_round_trip_through_the_parser_whatever_the_chunking() -> None:
    stream = b"".join(typed_frame(event) for event in EVENTS) + data_frame({"n": 1})
    for size in (1, 2, 7, len(stream)):
        parser = SSEParser()
        frames = []
        for start in range(0, len(stream), size):
            frames += parser.feed(stream[start : start + size])
        assert [data for _, data in frames] == [*EVENTS, {"n": 1}]
        assert b"".join(raw for raw, _ in frames) == stream  # what the client gets, byte for byte


def test_a_typed_frame_names_its_event_and_defaults_to_message() -> None:
    assert typed_frame({"type": "ping"}).startswith(b"event: ping\ndata: ")
    assert typed_frame({"x": 1}) == b'event: message\ndata: {"x": 1}\n\n'
    assert data_frame({"x": 1}) == b'data: {"x": 1}\n\n'


def test_the_parser_keeps_a_partial_event_until_its_blank_line() -> None:
    parser = SSEParser()
    assert parser.feed(b'event: a\ndata: {"a"') == []
    assert parser.feed(b": 1}\n") == []
    assert parser.feed(b"\n") == [(b'event: a\ndata: {"a": 1}\n\n', {"a": 1})]


def test_the_parser_reads_crlf_multiline_data_and_non_json_as_empty() -> None:
    frames = SSEParser().feed(
        b'data: {"a":\r\ndata: 1}\r\n\r\n'  # two data lines are one payload
        b"data: not json\n\n"
        b"data: [1, 2]\n\n"  # JSON, but not an object
        b": a comment, no data\n\n"
    )
    assert [data for _, data in frames] == [{"a": 1}, {}, {}, {}]
    assert frames[0][0] == b'data: {"a":\ndata: 1}\n\n'


def test_the_parser_finds_a_crlf_blank_line_split_across_chunks() -> None:
    parser = SSEParser()
    frames = parser.feed(b'data: {"a": 1}\r\n\r') + parser.feed(b'\ndata: {"b": 2}\r\n\r\n')
    assert [data for _, data in frames] == [{"a": 1}, {"b": 2}]


@pytest.mark.parametrize(
    ("buffer", "whole"),
    [
        (b"", b""),
        (b"data: 1\n", b""),  # no blank line yet
        (b"data: 1\n\ndata: 2", b"data: 1\n\n"),
        (b"data: 1\n\ndata: 2\n\ndata: 3\n", b"data: 1\n\ndata: 2\n\n"),
        (b"data: 1\r\n\r\ndata: 2\r\n", b"data: 1\r\n\r\n"),
        (b"data: 1\r\rdata: 2", b"data: 1\r\r"),
        (b"data: 1\n\ndata: 2\r\n\r\nda", b"data: 1\n\ndata: 2\r\n\r\n"),  # mixed: the last one wins
    ],
)
def test_split_events_cuts_after_the_last_blank_line(buffer: bytes, whole: bytes) -> None:
    assert buffer[: split_events(buffer)] == whole


def test_data_lines_give_each_payload_and_where_its_line_starts() -> None:
    events = b'event: a\ndata: {"a": 1}\n\n: comment\r\ndata:[DONE]\r\n\r\n'
    found = data_lines(events)
    assert [payload for _, payload in found] == [b'{"a": 1}', b"[DONE]"]
    assert all(events[offset:].startswith(b"data:") for offset, _ in found)
    assert is_done(found[1][1]) and not is_done(found[0][1])
    assert data_lines(b"event: x\n\n") == []


def test_event_start_is_after_the_blank_line_before_the_offset() -> None:
    events = b"data: 1\n\nevent: b\ndata: 2\n\n" + DONE_FRAME
    second = events.index(b"data: 2")
    assert events[event_start(events, second) :].startswith(b"event: b\n")
    assert event_start(events, events.index(b"data: [DONE]")) == events.index(DONE_FRAME)
    assert event_start(events, 3) == 0  # inside the first event


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"a": [1]}', {"a": [1]}),
        (b"[1]", None),
        (b'"text"', None),
        (b"null", None),
        (b"{broken", None),
        (b"\xff\xfe", None),  # not UTF-8
        (b"", None),
    ],
)
def test_json_object_is_an_object_or_none(payload: bytes, expected: dict[str, object] | None) -> None:
    assert json_object(payload) == expected


def test_a_data_frame_is_one_event_even_when_its_text_holds_blank_lines() -> None:
    frame = data_frame({"text": "a\n\nb\r\n\r\n"})
    assert split_events(frame) == len(frame) and frame.count(b"\n\n") == 1
    assert json.loads(data_lines(frame)[0][1]) == {"text": "a\n\nb\r\n\r\n"}
