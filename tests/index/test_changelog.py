"""Reads of the change log an index is derived from, on a real SQLite file.

tests/index/test_manager.py checks an index catching up through these reads; here the reads'
own promises: the seq matches the rows, last change per memory wins, only this embedder's
vectors, resets found, other scopes and tenants never mixed in.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memproxy.index.changelog import (
    Row,
    blob_vectors,
    latest_seq,
    read_changes,
    read_scope_rows,
    resets_after,
)
from memproxy.memory.rows import delete_memory, forget_scope, insert_memory, update_memory
from memproxy.scope import Scope
from memproxy.storage.database import RESET_MARKER_NUM, migrate
from memproxy.storage.engine import SqliteConnection

ALICE = Scope("t", "alice")
BOB = Scope("t", "bob")
OTHER_TENANT = Scope("u", "alice")
DIM = 4
IDENTITY = "fake:4"


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[SqliteConnection]:
    raw = sqlite3.connect(tmp_path / "m.sqlite3")
    migrate(raw)
    yield SqliteConnection(raw)
    raw.close()


def vector(seed: float) -> npt.NDArray[np.float32]:
    return np.full(DIM, seed, dtype=np.float32)


def add(conn: SqliteConnection, scope: Scope, text: str, identity: str = IDENTITY) -> int:
    with conn:
        memory = insert_memory(conn, scope, text, embedding=vector(len(text)), embed_model=identity,
                               source="manual", now=time.time())  # fmt: skip
    return memory.num


def memory_id(conn: SqliteConnection, num: int) -> str:
    return str(conn.execute("SELECT id FROM memories WHERE num = ?", (num,)).fetchone()[0])


def test_an_empty_scope_is_at_seq_zero(conn: SqliteConnection) -> None:
    assert read_scope_rows(conn, ALICE, IDENTITY) == (0, [])
    assert latest_seq(conn, ALICE) == 0 and read_changes(conn, ALICE, 0, IDENTITY) == (0, [])
    assert resets_after(conn, 0) == []


def test_scope_rows_come_with_the_seq_they_reflect_and_only_their_own(conn: SqliteConnection) -> None:
    first = add(conn, ALICE, "one")
    add(conn, BOB, "bob's")
    add(conn, OTHER_TENANT, "same user id, other tenant")
    second = add(conn, ALICE, "two")
    seq, rows = read_scope_rows(conn, ALICE, IDENTITY)
    assert [(r.num, r.text) for r in rows] == [(first, "one"), (second, "two")]
    assert seq == latest_seq(conn, ALICE) and seq > latest_seq(conn, BOB) > 0
    assert rows[0].embedding == vector(3).tobytes()


def test_only_this_embedders_vectors_are_returned(conn: SqliteConnection) -> None:
    add(conn, ALICE, "embedded by us")
    add(conn, ALICE, "embedded by another model", identity="other:4")
    _, rows = read_scope_rows(conn, ALICE, IDENTITY)
    assert [r.embedding is not None for r in rows] == [True, False]
    assert [r.text for r in rows] == ["embedded by us", "embedded by another model"]  # still found lexically


def test_changes_give_the_current_state_of_each_memory_changed_after_a_seq(conn: SqliteConnection) -> None:
    kept = add(conn, ALICE, "kept")
    since = latest_seq(conn, ALICE)
    edited = add(conn, ALICE, "first text")
    gone = add(conn, ALICE, "to delete")
    add(conn, BOB, "not alice's")
    with conn:
        update_memory(conn, "t", memory_id(conn, edited), source="manual", now=time.time(), text="second text",
                      embedding=vector(9), embed_model=IDENTITY)  # fmt: skip
        delete_memory(conn, "t", memory_id(conn, gone), source="manual", now=time.time())
    seq, rows = read_changes(conn, ALICE, since, IDENTITY)
    assert seq == latest_seq(conn, ALICE)
    state = {r.num: (r.text, r.embedding) for r in rows}
    assert state == {edited: ("second text", vector(9).tobytes()), gone: (None, None)}  # last change wins
    assert kept not in state
    assert read_changes(conn, ALICE, seq, IDENTITY) == (seq, [])  # caught up: nothing, same seq


def test_a_forgotten_scope_leaves_a_reset_marker(conn: SqliteConnection) -> None:
    add(conn, ALICE, "one")
    add(conn, BOB, "bob's")
    before = latest_seq(conn, ALICE)
    with conn:
        forget_scope(conn, ALICE)
    seq, rows = read_changes(conn, ALICE, before, IDENTITY)
    assert [(r.num, r.text) for r in rows] == [(RESET_MARKER_NUM, None)]
    assert resets_after(conn, 0) == [(ALICE.key, seq)]
    assert resets_after(conn, seq) == []
    with conn:
        forget_scope(conn, ALICE)
    assert resets_after(conn, 0) == [(ALICE.key, latest_seq(conn, ALICE))]  # the newest marker only


def test_blob_vectors_skip_rows_without_a_usable_vector() -> None:
    rows = [
        Row(1, "a", vector(1).tobytes()),
        Row(2, "b", None),
        Row(3, "c", np.ones(DIM + 1, dtype=np.float32).tobytes()),  # another dimension
        Row(4, "d", vector(4).tobytes()),
    ]
    nums, matrix = blob_vectors(rows, DIM)
    assert nums == [1, 4] and matrix.shape == (2, DIM) and matrix.dtype == np.float32
    np.testing.assert_array_equal(matrix[1], vector(4))
    empty_nums, empty = blob_vectors([Row(2, "b", None)], DIM)
    assert empty_nums == [] and empty.shape == (0, DIM)
