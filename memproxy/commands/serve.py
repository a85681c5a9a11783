"""``memproxy serve``: one uvicorn process, or ``--workers N`` processes on one port.

With N > 1 this module is the supervisor. Each worker process listens on a socket of its
own, bound to the same address with ``SO_REUSEPORT``, so the kernel spreads incoming
connections evenly over the workers. (uvicorn's own ``--workers`` shares one listening
socket: whichever process wakes first accepts, and with keep-alive clients a connection
stays where it landed; measured 24 of 32 client connections on one of two workers, which
then saturated while the other idled.) The supervisor keeps the port bound, never
listening, so the address stays taken between worker restarts and a busy port fails at
once. Workers are started with ``spawn`` and receive the settings the command resolved
(file, environment, ``--host``/``--port``) as an argument; nothing else travels.

Start-up order: the port is bound first (``bind_port``, before the model and the app load,
which take seconds), so a port in use is one line at once, not uvicorn's ``[Errno 98]``
after the load. The bound socket is what one process serves on; with ``--workers`` it is
the supervisor's holder.

What sharing one data dir between processes relies on (each is a full memproxy app):
- SQLite in WAL mode: readers never block, one writer at a time, ``busy_timeout`` absorbs
  contention; migrations run in ``BEGIN IMMEDIATE`` so concurrent starts apply them once.
- Indexes are per process and catch up from the change log before every search, so a
  memory written through one process is found through any other on its next request.
- The in-process extraction worker runs in every process; jobs are claimed under a lease
  in one ``BEGIN IMMEDIATE`` transaction, so no job is extracted twice at once.
- Index snapshots: unique temp names and an atomic rename (last writer wins with a whole
  file); one older than a forget made elsewhere is deleted (``IndexManager.drop_forgotten``).
- Per process: ``/metrics`` counters and histograms (a scrape sees the process that
  answered it; the job and index gauges are read from shared state), the query-embedding
  cache, the fast path's connection pool.

Supervisor invariants:
- SIGTERM/SIGINT: every worker gets SIGTERM and is given ``server.shutdown_grace_s`` plus
  a margin to finish, then is killed; the supervisor exits 0.
- A worker that exits while the supervisor runs is replaced, unless it never started
  serving (exit code 3: the app or the socket is broken and would fail again): then all
  stop and the supervisor exits 3.
- Workers get SIGTERM when the supervisor dies (Linux ``PR_SET_PDEATHSIG``), so a killed
  supervisor leaves no process holding the port.
- A worker names itself ``memproxy-worker`` (Linux ``PR_SET_NAME``: ``ps``, ``top`` and
  ``/proc/<pid>/comm`` show it), so it can be told from the supervisor's other children
  (multiprocessing's ``resource_tracker``) by more than a command line, which holds the
  interpreter's path and so whatever directory the checkout is in.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from multiprocessing.process import BaseProcess

from memproxy.config import ServerSettings, Settings

log = logging.getLogger("memproxy.serving")

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
# What a worker process calls itself (at most 15 bytes: the kernel's comm limit).
WORKER_NAME = "memproxy-worker"
STARTUP_FAILURE = 3
# Beyond the workers' own graceful shutdown: interpreter exit, index snapshots.
_STOP_MARGIN_S = 10.0


class BindError(Exception):
    """The configured address cannot be bound; the message is the one line to show."""


def bind_port(server: ServerSettings, workers: int) -> socket.socket:
    """The serving socket, bound (resolving port 0) and not yet listening.

    With ``workers > 1`` it is ``SO_REUSEPORT`` so the workers' sockets can join it. Such a
    bind also succeeds where another ``SO_REUSEPORT`` socket of this user already holds the
    port (another memproxy's supervisor), which would split the traffic between the two
    servers; a plain bind first tells that case apart.
    """
    if workers > 1 and not hasattr(socket, "SO_REUSEPORT"):
        raise BindError("--workers needs SO_REUSEPORT (Linux, BSD, macOS); run one process per port instead")
    try:
        if workers > 1 and server.port != 0:
            port_socket(server.host, server.port, share=False).close()
        return port_socket(server.host, server.port, share=workers > 1)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise BindError(f"port {server.port} is in use: pass --port or stop the other process") from None
        raise BindError(f"cannot listen on {server.host}:{server.port}: {exc.strerror or exc}") from None


def run_server(settings: Settings, workers: int, listener: socket.socket) -> int:
    """Serve on ``listener`` (from ``bind_port``) until SIGTERM/SIGINT; the exit code (0
    after a clean shutdown)."""
    from memproxy.api.app import create_app
    from memproxy.api.uvicorn_server import serve

    # uvicorn re-raises the SIGTERM it handled once shutdown is done, which would end the
    # process with -SIGTERM; a clean, graceful shutdown should exit 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    if workers <= 1:
        return serve(create_app(settings), settings, sockets=[listener])
    return Supervisor(settings, workers).run(listener)


def port_socket(host: str, port: int, share: bool = True) -> socket.socket:
    """A TCP socket bound to ``host:port``; with ``share``, other ``SO_REUSEPORT`` sockets may
    bind beside it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if share:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def quiet_library_loaders() -> None:
    """faiss logs which CPU build it loads at INFO, including a caught
    ``ModuleNotFoundError`` for a build it then does without, which reads as a failure: at
    every start. Those lines are shown at DEBUG only."""
    logging.getLogger("faiss.loader").addFilter(_demote_to_debug)


def _demote_to_debug(record: logging.LogRecord) -> bool:
    if record.levelno <= logging.INFO:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return logging.getLogger(record.name).isEnabledFor(record.levelno)


class Supervisor:
    def __init__(self, settings: Settings, workers: int) -> None:
        self.settings = settings
        self.workers = workers
        self.stop = threading.Event()
        self.context = multiprocessing.get_context("spawn")

    def run(self, holder: socket.socket) -> int:
        """``holder``: the port, bound with ``SO_REUSEPORT`` (``bind_port``); it never listens."""
        server = self.settings.server
        with holder:
            port = int(holder.getsockname()[1])
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda signum, frame: self.stop.set())
            processes = [self._start(port) for _ in range(self.workers)]
            shown = f"[{server.host}]" if ":" in server.host else server.host
            log.info("memproxy listening on http://%s:%d with %d worker processes (Ctrl-C to stop)",
                     shown, port, self.workers)  # fmt: skip
            code = self._watch(processes, port)
            self._stop_all(processes)
        return code

    def _start(self, port: int) -> BaseProcess:
        process = self.context.Process(target=worker_main, args=(self.settings, port), name="memproxy-worker")
        process.start()
        return process

    def _watch(self, processes: list[BaseProcess], port: int) -> int:
        while not self.stop.wait(0.5):
            for index, process in enumerate(processes):
                if process.is_alive():
                    continue
                if process.exitcode == STARTUP_FAILURE:
                    log.error("worker %s could not start serving; stopping", process.pid)
                    return STARTUP_FAILURE
                log.warning("worker %s exited (code %s); starting another", process.pid, process.exitcode)
                processes[index] = self._start(port)
        return 0

    def _stop_all(self, processes: list[BaseProcess]) -> None:
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.server.shutdown_grace_s + _STOP_MARGIN_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning("worker %s did not stop in time; killing it", process.pid)
                process.kill()
                process.join()


def worker_main(settings: Settings, port: int) -> None:
    """One worker process: its own ``SO_REUSEPORT`` socket on ``port``, the full app."""
    _die_with_supervisor()
    _name_process(WORKER_NAME)
    from memproxy.api.access_log import configure_logging

    configure_logging(settings.server)
    quiet_library_loaders()
    try:
        from memproxy.api.app import create_app
        from memproxy.api.uvicorn_server import serve

        app = create_app(settings)
        sock = port_socket(settings.server.host, port)
    except Exception:
        log.exception("worker failed to start")
        sys.exit(STARTUP_FAILURE)
    # From here uvicorn handles SIGTERM (gracefully) and re-raises it once shut down, which this
    # no-op absorbs (see run_server). Before, SIGTERM's default ends a worker still starting.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    sys.exit(serve(app, settings, announce=None, sockets=[sock]))


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _die_with_supervisor() -> None:
    libc = _libc()
    if libc is not None:  # without libc the worker simply outlives a killed supervisor
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _name_process(name: str) -> None:
    """Set the calling (main) thread's name, which is the process's ``comm``."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))
