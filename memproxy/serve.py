"""``memproxy serve``: one uvicorn process, or ``--workers N`` processes on one socket.

With N > 1, uvicorn's supervisor binds the socket once and starts N worker processes,
each importing ``worker_app`` (an app factory: uvicorn can only pass an import string to a
new process). A worker re-reads the configuration the way the command did — the file the
command resolved (``MEMPROXY_CONFIG``, set here) plus the same ``MEMPROXY_*`` environment
— so no setting, and no secret, travels any other way.

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
- Workers get SIGTERM when the supervisor dies (Linux ``PR_SET_PDEATHSIG``), so a killed
  supervisor leaves no process holding the port.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
from pathlib import Path

from memproxy.config import Settings, find_config_path, load_settings

log = logging.getLogger("memproxy.serving")

_PR_SET_PDEATHSIG = 1


def run_server(settings: Settings, config_path: Path | None, workers: int) -> int:
    """Serve until SIGTERM/SIGINT; the exit code (0 after a clean shutdown)."""
    import uvicorn

    from memproxy.api.app import create_app
    from memproxy.api.serving import serve, uvicorn_options

    # uvicorn re-raises the SIGTERM it handled once shutdown is done, which would end the
    # process with -SIGTERM; a clean, graceful shutdown should exit 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    if workers <= 1:
        return serve(create_app(settings), settings)
    if config_path is not None:
        os.environ["MEMPROXY_CONFIG"] = str(config_path.resolve())
    log.warning("memproxy listening on http://%s:%d with %d worker processes (Ctrl-C to stop)",
                settings.server.host, settings.server.port, workers)  # fmt: skip
    uvicorn.run("memproxy.serve:worker_app", factory=True, workers=workers, **uvicorn_options(settings))
    return 0


def worker_app() -> object:
    """The app of one worker process (uvicorn calls this in each of them)."""
    from memproxy.api.access_log import configure_logging
    from memproxy.api.app import create_app

    _die_with_supervisor()
    settings = load_settings(find_config_path(None, dict(os.environ)))
    configure_logging(settings.server)
    return create_app(settings)


def _die_with_supervisor() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # no libc to ask: the worker simply outlives a killed supervisor
        pass
