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
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from multiprocessing.process import BaseProcess

from memproxy.config import Settings

log = logging.getLogger("memproxy.serving")

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
# What a worker process calls itself (at most 15 bytes: the kernel's comm limit).
WORKER_NAME = "memproxy-worker"
STARTUP_FAILURE = 3
# Beyond the workers' own graceful shutdown: interpreter exit, index snapshots.
_STOP_MARGIN_S = 10.0


def run_server(settings: Settings, workers: int) -> int:
    """Serve until SIGTERM/SIGINT; the exit code (0 after a clean shutdown)."""
    from memproxy.api.app import create_app
    from memproxy.api.serving import serve

    # uvicorn re-raises the SIGTERM it handled once shutdown is done, which would end the
    # process with -SIGTERM; a clean, graceful shutdown should exit 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    if workers <= 1:
        return serve(create_app(settings), settings)
    return Supervisor(settings, workers).run()


def port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` that other ``SO_REUSEPORT`` sockets may share."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


class Supervisor:
    def __init__(self, settings: Settings, workers: int) -> None:
        self.settings = settings
        self.workers = workers
        self.stop = threading.Event()
        self.context = multiprocessing.get_context("spawn")

    def run(self) -> int:
        if not hasattr(socket, "SO_REUSEPORT"):
            log.error("--workers needs SO_REUSEPORT (Linux, BSD, macOS); run one process per port instead")
            return 1
        server = self.settings.server
        try:
            holder = port_socket(server.host, server.port)  # resolves port 0; never listens
        except OSError as exc:
            log.error("cannot bind %s:%d: %s", server.host, server.port, exc)
            return 1
        with holder:
            port = int(holder.getsockname()[1])
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda signum, frame: self.stop.set())
            processes = [self._start(port) for _ in range(self.workers)]
            shown = f"[{server.host}]" if ":" in server.host else server.host
            log.warning("memproxy listening on http://%s:%d with %d worker processes (Ctrl-C to stop)",
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
    try:
        from memproxy.api.app import create_app
        from memproxy.api.serving import serve

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
