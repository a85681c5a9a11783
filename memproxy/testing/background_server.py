"""Serve an ASGI app with uvicorn on a loopback port from a background thread.

For the demo, the benchmarks and the tests: ``with BackgroundServer(app) as srv:`` starts
the server, waits until it accepts connections and stops it (running the app's lifespan
shutdown) on exit. The thread is joined on exit; nothing is left running.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class BackgroundServer:
    def __init__(
        self, app: Any, port: int | None = None, *, startup_timeout_s: float = 60.0, **options: Any
    ) -> None:
        """``options`` go to ``uvicorn.Config`` (e.g. ``api.serving.uvicorn_options``'s ``http``)."""
        self.port = port or free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", **options
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"uvicorn-{self.port}", daemon=True)
        self._startup_timeout_s = startup_timeout_s

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("server thread exited during startup")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
