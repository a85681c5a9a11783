"""A loopback-only network namespace for the test thread, and trap servers inside it.

Routing tests start memproxy with LiteLLM's provider defaults in play: a mistake would send
a request (with a key) to ``localhost:11434`` or to a public host. Inside ``loopback_only``
the calling thread, and every thread it starts (the servers' threads), sees one network
interface, ``lo``: a public host is unreachable and a local provider's default port is
whatever trap the test put there. ``unshare(CLONE_NEWNET)`` acts on the calling thread
only, so threads started before (other suites' session servers) keep the machine's network,
and leaving the block moves the thread back.

Needs CAP_SYS_ADMIN (root, as in CI); elsewhere the suite is skipped, except under CI where
a missing sandbox fails.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_IFREQ = "16sH22x"


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _loopback_up() -> None:
    """A new namespace's ``lo`` is down: bring it up (``ip link set lo up``, without iproute2)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


@contextmanager
def loopback_only() -> Iterator[None]:
    """Run the block (and the threads it starts) in a fresh network namespace with only ``lo``."""
    libc = _libc()
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.unshare(_CLONE_NEWNET) != 0:
            reason = f"no loopback-only network namespace here ({os.strerror(ctypes.get_errno())})"
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
        try:
            _loopback_up()
            names = [name for _, name in socket.if_nameindex()]
            assert names == ["lo"], f"the sandbox has other interfaces: {names}"
            yield
        finally:
            if libc.setns(home, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "could not return to the machine's network namespace")
    finally:
        os.close(home)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class Trap:
    """An HTTP server on ``127.0.0.1:port`` that records every request and answers 200 with a
    small JSON object (enough for a model lookup to succeed when a test wants it to)."""

    def __init__(self, port: int = 0, name: str = "") -> None:
        self.name = name
        self._seen: list[Seen] = []
        self._lock = threading.Lock()
        trap = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with trap._lock:
                    trap._seen.append(
                        Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
                    )
                body = json.dumps({"id": self.path.rsplit("/", 1)[-1], "object": "model", "owned_by": "trap"})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            do_GET = do_POST = do_DELETE = do_PUT = _record

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        # serve_forever checks for shutdown every poll_interval (0.5 s by default): that long
        # was each trap's close; a tenth of it costs the idle thread nothing worth counting.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=f"trap-{self.port}", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
