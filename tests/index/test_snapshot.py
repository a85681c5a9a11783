"""The snapshot file format: round trip, alignment, every kind of damage refused, atomic writes.

tests/index/test_manager.py checks snapshots through the IndexManager (reopen, rebuild when
corrupt); here the format's own promises, on bytes and files made by hand.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memproxy.index.snapshot import (
    FORMAT_VERSION,
    MAGIC,
    SnapshotError,
    decode,
    encode,
    load,
    read_seq,
    write_atomic,
)

ARRAYS: dict[str, npt.NDArray[Any]] = {
    "nums": np.arange(5, dtype=np.int64),
    "vectors": np.linspace(-1, 1, 3 * 7, dtype=np.float32).reshape(3, 7),
    "codes": np.arange(6, dtype=np.float16).reshape(2, 3)[:, ::2],  # not contiguous
    "empty": np.zeros((0, 4), dtype=np.float32),
    "flags": np.array([1, 0, 1], dtype=np.uint8),
}


def whole(chunks: list[bytes | memoryview]) -> bytes:
    return b"".join(bytes(chunk) for chunk in chunks)


def forge(header: dict[str, Any], payload: bytes) -> bytes:
    """A snapshot with a valid checksum over whatever header and payload it is given."""
    head = json.dumps(header).encode()
    digest = hashlib.sha256(head + payload).hexdigest().encode()
    return MAGIC + head + b"\n" + digest + b"\n" + payload


def test_a_round_trip_gives_the_same_header_and_arrays_as_read_only_views() -> None:
    data = whole(encode({"seq": 7, "identity": "hash:256"}, ARRAYS))
    header, arrays = decode(data)
    assert header == {"seq": 7, "identity": "hash:256", "format": FORMAT_VERSION}
    assert list(arrays) == list(ARRAYS)
    for name, original in ARRAYS.items():
        assert arrays[name].dtype == original.dtype and arrays[name].shape == original.shape
        np.testing.assert_array_equal(arrays[name], original)
        assert not arrays[name].flags.writeable


def test_every_array_starts_64_byte_aligned() -> None:
    data = whole(encode({"seq": 1}, ARRAYS))
    manifest = json.loads(data[len(MAGIC) : data.index(b"\n", len(MAGIC))])["arrays"]
    assert all(entry["offset"] % 64 == 0 for entry in manifest)


def test_any_flipped_byte_of_the_digest_or_payload_is_detected() -> None:
    data = whole(encode({"seq": 3}, ARRAYS))
    for position in range(data.index(b"\n", len(MAGIC)) + 1, len(data), 3):
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        with pytest.raises(SnapshotError):
            decode(bytes(damaged))


@pytest.mark.parametrize(
    ("good", "bad"), [(b'"dtype"', b'"dtypd"'), (b'"<i8"', b'"<h8"'), (b'"<i8"', b'"<i("')]
)
def test_a_flipped_byte_in_the_manifest_is_a_snapshot_error(good: bytes, bad: bytes) -> None:
    data = whole(encode({"seq": 3}, {"nums": np.arange(3, dtype=np.int64)}))
    assert good in data
    with pytest.raises(SnapshotError):
        decode(data.replace(good, bad, 1))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"NOT-A-SNAPSHOT\n{}\n00\n",
        MAGIC,
        MAGIC + b'{"format": 2, "arrays": []}',
        MAGIC + b"{broken\nab\n",
    ],
)
def test_other_files_and_truncated_headers_are_refused(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        decode(data)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({"format": 1, "arrays": []}, "unknown snapshot format 1"),
        ({"arrays": []}, "unknown snapshot format None"),
        ({"format": FORMAT_VERSION}, "unreadable header"),  # no manifest
        ({"format": FORMAT_VERSION, "arrays": [{"name": "o", "dtype": "|O", "shape": [1], "offset": 0,
                                                "nbytes": 8}]}, "bad array entry 'o'"),
        ({"format": FORMAT_VERSION, "arrays": [{"name": "far", "dtype": "<f4", "shape": [4], "offset": 8,
                                                "nbytes": 16}]}, "bad array entry 'far'"),
        ({"format": FORMAT_VERSION, "arrays": [{"name": "neg", "dtype": "<f4", "shape": [1], "offset": -4,
                                                "nbytes": 4}]}, "bad array entry 'neg'"),
        ({"format": FORMAT_VERSION, "arrays": [{"name": "odd", "dtype": "<f4", "shape": [1], "offset": 0,
                                                "nbytes": 3}]}, "bad array entry 'odd'"),
    ],
)  # fmt: skip
def test_a_checksummed_but_unusable_manifest_is_refused(header: dict[str, Any], reason: str) -> None:
    with pytest.raises(SnapshotError, match=reason):
        decode(forge(header, b"\0" * 16))


def test_read_seq_reads_the_header_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.faiss"
    write_atomic(path, encode({"seq": 42}, ARRAYS))
    assert read_seq(path) == 42
    path.write_bytes(path.read_bytes()[:-10])  # a damaged payload: the seq is still readable
    assert read_seq(path) == 42
    for content in (b"", b"other file\n", MAGIC + b"{}\n", MAGIC + b'{"seq": "x"}\n', MAGIC + b"[1]\n"):
        path.write_bytes(content)
        assert read_seq(path) is None
    assert read_seq(tmp_path / "missing") is None


def test_load_builds_from_the_file_and_returns_only_once_verified(tmp_path: Path) -> None:
    path = tmp_path / "s.faiss"
    write_atomic(path, encode({"seq": 5}, ARRAYS))
    waited: list[bool] = []

    def build(header: dict[str, Any], arrays: dict[str, npt.NDArray[Any]], wait: Any) -> Any:
        copied = {name: np.array(array) for name, array in arrays.items()}  # must copy what it keeps
        wait()
        waited.append(True)
        return header["seq"], copied

    seq, copied = load(path, build)
    assert seq == 5 and waited == [True]
    np.testing.assert_array_equal(copied["vectors"], ARRAYS["vectors"])

    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(SnapshotError, match="checksum"):
        load(path, lambda header, arrays, wait: header)  # a build that never waits is still refused


def test_write_atomic_replaces_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "index" / "nested" / "s.faiss"
    write_atomic(path, encode({"seq": 1}, ARRAYS))
    write_atomic(path, encode({"seq": 2}, ARRAYS))
    assert decode(path.read_bytes())[0]["seq"] == 2
    assert [p.name for p in path.parent.iterdir()] == ["s.faiss"]


def test_a_failed_write_keeps_the_old_snapshot_and_removes_its_temp(tmp_path: Path) -> None:
    path = tmp_path / "s.faiss"
    write_atomic(path, encode({"seq": 1}, ARRAYS))
    before = path.read_bytes()
    broken: list[Any] = [MAGIC, b"half a header", "not bytes"]  # write() raises on the third chunk
    with pytest.raises(TypeError):
        write_atomic(path, broken)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.faiss"]
