"""``api.stream_relay.relay``, the one loop every surface's stream goes through, with small
sources (a list of pieces, optionally failing) and a real ``Capture`` on an SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memproxy.api.stream_relay import relay
from memproxy.errors import ApiError
from memproxy.outbox import queue
from memproxy.outbox.capture import Capture, PlannedCapture, StreamAccumulator, StreamCapture
from memproxy.scope import Scope
from memproxy.storage.database import SqliteDatabase
from memproxy.wire.sse import DONE_FRAME, Piece, data_frame

SCOPE = Scope("tenant-relay", "u1", "")
CHUNK = {"choices": [{"index": 0, "delta": {"content": "hello"}, "finish_reason": None}]}
FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


class Source:
    def __init__(self, pieces: list[Piece], fail_after: int | None = None) -> None:
        self._pieces = pieces
        self._fail_after = fail_after
        self.closed = False

    async def pieces(self) -> AsyncIterator[Piece]:
        for i, piece in enumerate(self._pieces):
            if i == self._fail_after:
                raise ConnectionResetError("cut")
            yield piece

    def error(self, exc: Exception) -> ApiError:
        return ApiError(502, f"the provider went away: {exc}", type="upstream_error")

    async def close(self) -> None:
        self.closed = True


def error_frame(error: ApiError, last: bytes) -> bytes:
    return b"error after " + last + b": " + error.message.encode()


def chat_pieces(*, final: bool = True) -> list[Piece]:
    pieces = [Piece(data_frame(CHUNK), [CHUNK]), Piece(data_frame(FINISH), [FINISH])]
    return [*pieces, Piece(DONE_FRAME, [], final=True)] if final else pieces


@contextlib.asynccontextmanager
async def opened(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    database = SqliteDatabase(tmp_path / "memproxy.db")
    await database.open()
    try:
        yield database
    finally:
        await database.close()


async def job_exists(db: SqliteDatabase, job_id: str) -> bool:
    return await db.run(lambda conn: queue.get_job(conn, SCOPE.tenant, job_id)) is not None


def stream_capture(db: SqliteDatabase) -> StreamCapture:
    plan = PlannedCapture(queue.new_job_id(), SCOPE, "", [{"role": "user", "content": "hi"}])
    return StreamCapture(Capture(db), plan, StreamAccumulator())


def test_the_final_event_goes_out_only_once_the_turn_is_committed(tmp_path: Path) -> None:
    async def run() -> None:
        async with opened(tmp_path) as database:
            capture = stream_capture(database)
            source = Source(chat_pieces())
            sent = relay(source, capture, error_frame)
            assert await anext(sent) == data_frame(CHUNK)
            assert await anext(sent) == data_frame(FINISH)
            assert not await job_exists(database, capture.plan.job_id)
            assert await anext(sent) == DONE_FRAME
            assert await job_exists(database, capture.plan.job_id)
            assert [x async for x in sent] == [] and source.closed

    asyncio.run(run())


def test_a_failure_after_the_first_byte_ends_with_one_error_event_and_captures_nothing(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        async with opened(tmp_path) as database:
            capture = stream_capture(database)
            source = Source(chat_pieces(), fail_after=1)
            sent = [x async for x in relay(source, capture, error_frame)]
            assert sent == [data_frame(CHUNK), error_frame(source.error(ConnectionResetError("cut")),
                                                           data_frame(CHUNK))]  # fmt: skip
            assert source.closed and not await job_exists(database, capture.plan.job_id)

    asyncio.run(run())


@pytest.mark.parametrize("finished", [True, False])
def test_a_stream_without_a_final_event_is_captured_at_its_end_only_if_the_reply_finished(
    tmp_path: Path, finished: bool
) -> None:
    async def run() -> None:
        async with opened(tmp_path) as database:
            capture = stream_capture(database)
            pieces = chat_pieces(final=False) if finished else chat_pieces(final=False)[:1]
            sent = [x async for x in relay(Source(pieces), capture, error_frame)]
            assert sent == [p.raw for p in pieces]
            assert await job_exists(database, capture.plan.job_id) is finished

    asyncio.run(run())


def test_a_client_that_leaves_closes_the_source_and_captures_nothing(tmp_path: Path) -> None:
    async def run() -> None:
        async with opened(tmp_path) as database:
            capture = stream_capture(database)
            source = Source(chat_pieces())
            sent = relay(source, capture, error_frame)
            await anext(sent)
            await sent.aclose()  # what cancelling the response does to its body iterator
            assert source.closed and not await job_exists(database, capture.plan.job_id)

    asyncio.run(run())


def test_pieces_carrying_raw_payloads_are_parsed_for_capture(tmp_path: Path) -> None:
    async def run() -> None:
        async with opened(tmp_path) as database:
            capture = stream_capture(database)
            pieces = [Piece(data_frame(CHUNK) + data_frame(FINISH), [data_frame(CHUNK)[6:-2], b"not json",
                                                                     data_frame(FINISH)[6:-2]]),
                      Piece(DONE_FRAME, [], final=True)]  # fmt: skip
            assert [x async for x in relay(Source(pieces), capture, error_frame)][-1] == DONE_FRAME
            assert capture.accumulator.message() == {"role": "assistant", "content": "hello"}
            assert await job_exists(database, capture.plan.job_id)

    asyncio.run(run())


def test_a_failure_after_the_final_event_adds_no_error_event(tmp_path: Path) -> None:
    """The client already has the whole answer (and the turn is captured): nothing follows ``[DONE]``."""

    async def run() -> None:
        async with opened(tmp_path) as database:
            capture = stream_capture(database)
            source = Source([*chat_pieces(), Piece(b"data: late\n\n", [])], fail_after=3)
            sent = [x async for x in relay(source, capture, error_frame)]
            assert sent == [p.raw for p in chat_pieces()] and source.closed
            assert await job_exists(database, capture.plan.job_id)

    asyncio.run(run())
