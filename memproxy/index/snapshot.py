"""The index snapshot file format: a checksummed header plus raw, aligned numpy arrays.

Layout: ``MAGIC``, a JSON header line, a sha256 hex line, then the payload (the arrays'
bytes, each 64-byte aligned). The header lists every array's name, dtype, shape and
offset, so loading is ``np.frombuffer`` views with no parsing or pickling; the sha256
covers header and payload, so any flipped byte is detected.

Invariants:
- Files are written to a unique temp name in the same directory, fsynced, then
  ``os.replace``d over the old file (and the directory fsynced): a reader sees the old
  snapshot or the new one, never a torn one.
- ``decode`` accepts only numeric dtypes (never object arrays) and bounds-checks offsets.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

MAGIC = b"MEMPROXY-SNAPSHOT\n"
FORMAT_VERSION = 2
_ALIGN = 64

Arrays = dict[str, npt.NDArray[Any]]
T = TypeVar("T")


class SnapshotError(Exception):
    """A snapshot that cannot be used (corrupt, truncated, other format)."""


def encode(header: dict[str, Any], arrays: Arrays) -> list[bytes | memoryview]:
    """The file's bytes as chunks (arrays are not copied)."""
    manifest: list[dict[str, Any]] = []
    chunks: list[bytes | memoryview] = []
    offset = 0
    for name, array in arrays.items():
        contiguous = np.ascontiguousarray(array)
        pad = -offset % _ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        manifest.append({"name": name, "dtype": contiguous.dtype.str, "shape": list(contiguous.shape),
                         "offset": offset, "nbytes": contiguous.nbytes})  # fmt: skip
        chunks.append(contiguous.reshape(-1).view(np.uint8).data)
        offset += contiguous.nbytes
    head = json.dumps({**header, "format": FORMAT_VERSION, "arrays": manifest}, sort_keys=True).encode()
    digest = hashlib.sha256(head)
    for chunk in chunks:
        digest.update(chunk)
    return [MAGIC, head, b"\n", digest.hexdigest().encode(), b"\n", *chunks]


@dataclass
class _Parsed:
    header: dict[str, Any]
    arrays: Arrays
    head: memoryview
    payload: memoryview
    digest: bytes

    def verify(self) -> None:
        digest = hashlib.sha256(self.head)
        digest.update(self.payload)  # releases the GIL: runs alongside the build
        if digest.hexdigest().encode() != self.digest:
            raise SnapshotError("checksum mismatch")


def _parse(data: bytes | mmap.mmap) -> _Parsed:
    """Split and bounds-check a snapshot without verifying its checksum yet."""
    if data[: len(MAGIC)] != MAGIC:
        raise SnapshotError("bad magic")
    head_end = data.find(b"\n", len(MAGIC))
    digest_end = data.find(b"\n", head_end + 1) if head_end >= 0 else -1
    if digest_end < 0:
        raise SnapshotError("truncated header")
    view = memoryview(data)
    head, payload = view[len(MAGIC) : head_end], view[digest_end + 1 :]
    try:
        header: dict[str, Any] = json.loads(bytes(head))
        manifest = header.pop("arrays")
    except (ValueError, KeyError, AttributeError):
        raise SnapshotError("unreadable header") from None
    if header.get("format") != FORMAT_VERSION:
        raise SnapshotError(f"unknown snapshot format {header.get('format')!r}")
    arrays: Arrays = {}
    for entry in manifest:
        # A damaged entry (its checksum is verified later) is refused, never raised as what numpy says.
        try:
            arrays[str(entry["name"])] = _array(entry, payload)
        except (KeyError, TypeError, ValueError, SyntaxError, AttributeError):
            raise SnapshotError("bad array entry") from None
    return _Parsed(header, arrays, head, payload, bytes(view[head_end + 1 : digest_end]))


def _array(entry: dict[str, Any], payload: memoryview) -> npt.NDArray[Any]:
    dtype = np.dtype(entry["dtype"])
    offset, nbytes = int(entry["offset"]), int(entry["nbytes"])
    if dtype.hasobject or offset < 0 or offset + nbytes > len(payload) or nbytes % max(dtype.itemsize, 1):
        raise SnapshotError(f"bad array entry {entry.get('name')!r}")
    flat = np.frombuffer(payload, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)
    return flat.reshape(entry["shape"])


def read_seq(path: Path) -> int | None:
    """The change seq a snapshot file reflects, from its header alone; None if unreadable."""
    try:
        with path.open("rb") as handle:
            if handle.read(len(MAGIC)) != MAGIC:
                return None
            header = json.loads(handle.readline())
        return int(header["seq"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def decode(data: bytes | mmap.mmap) -> tuple[dict[str, Any], Arrays]:
    """Verify and parse a snapshot; the arrays are read-only views into ``data``."""
    parsed = _parse(data)
    parsed.verify()
    return parsed.header, parsed.arrays


def load(path: Path, build: Callable[[dict[str, Any], Arrays, Callable[[], None]], T]) -> T:
    """``build(header, arrays, wait_verified)`` over a memory-mapped snapshot.

    The checksum is computed in a helper thread while ``build`` copies the arrays into
    their in-memory structures (loading costs max(hash, build) instead of the sum).
    ``build`` must call ``wait_verified()`` before any step that is unsafe on corrupt
    bytes (e.g. FAISS deserialization); plain array copies need not wait. The result
    is returned only once verified. ``build`` must copy what it keeps: the mapping is
    closed on return.
    """
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    parsed: _Parsed | None = None
    try:
        parsed = _parse(mapped)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memproxy-verify") as pool:
            verified = pool.submit(parsed.verify)
            try:
                result = build(parsed.header, parsed.arrays, verified.result)
            finally:
                verified.result()  # corrupt input explains any build error: report that
        return result
    finally:
        parsed = None
        # A view kept alive by a traceback makes close() fail; GC unmaps it later.
        with contextlib.suppress(BufferError):
            mapped.close()


def write_atomic(path: Path, chunks: list[bytes | memoryview]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # make the rename itself durable
    finally:
        os.close(fd)
