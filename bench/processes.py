"""Subprocesses for the bench scripts: ``memproxy serve``/``worker`` and the scripted upstream.

The bench scripts run as ``python bench/<name>.py``, so ``bench/`` is ``sys.path[0]`` and they
``import processes``. Invariants: every child started by ``running`` is terminated, then
killed if it outlives the grace period, and reaped when the block exits — on success, on an
exception and on a failed start; on Linux a child also gets SIGTERM when the bench process
dies (a timeout's SIGKILL included), so no server outlives its bench. Each child's output
goes to its own log file, whose tail is raised if the child dies while starting.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

STARTUP_TIMEOUT_S = 300.0  # six servers importing LiteLLM at once on 2 shared cores
STOP_GRACE_S = 30.0
PR_SET_PDEATHSIG = 1


def free_port() -> int:
    from memproxy.testing.background_server import free_port as pick

    return int(pick())


def serve_scripted_upstream(port: int) -> None:
    """Child-process entry: the scripted upstream (rule-based instant extractor) on ``port``."""
    import uvicorn

    from memproxy.testing.scripted_upstream import ScriptedUpstream

    uvicorn.run(ScriptedUpstream().app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


@dataclass
class Child:
    """One subprocess to start: its command line, its log file, and the URL that answers 200 when ready."""

    args: list[str]
    log_path: Path
    ready_url: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] | None = None  # added to this process's environment
    cwd: Path | None = None  # run from here (a checkout's root: ``python -m memproxy`` imports its code)

    def start(self) -> None:
        # Without a local cost map LiteLLM fetches one from the internet at import.
        env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
            **(self.env or {}),
        }
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.cwd,
                                         preexec_fn=die_with_parent())  # fmt: skip

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        if self.ready_url is None or self.proc is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"server for {self.ready_url} exited with {self.proc.returncode}:\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.ready_url, timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"{self.ready_url} did not become ready")


def memproxy_child(command: str, settings: dict[str, Any], work: Path, name: str, *extra: str) -> Child:
    """``python -m memproxy <command>`` on ``settings`` (written to ``work/<name>.yaml``, log ``<name>.log``),
    with ``extra`` arguments (``--workers 2``).

    A ``serve`` child is ready when its ``/readyz`` answers 200; a ``worker`` has no HTTP port.
    """
    config = work / f"{name}.yaml"
    config.write_text(yaml.safe_dump(settings))
    args = [sys.executable, "-m", "memproxy", command, "--config", str(config), *extra]
    ready = f"http://127.0.0.1:{settings['server']['port']}/readyz" if command == "serve" else None
    return Child(args, work / f"{name}.log", ready)


def upstream_child(script: str, flag: str, port: int, log_path: Path) -> Child:
    """``script``'s hidden ``flag PORT`` mode serving the scripted upstream; ready when it lists models."""
    args = [sys.executable, str(Path(script).resolve()), flag, str(port)]
    return Child(args, log_path, f"http://127.0.0.1:{port}/v1/models")


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the child when this process dies.

    Without it a bench killed by a timeout (SIGKILL) would leave its servers running.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

    def set_death_signal() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return set_death_signal


@contextlib.contextmanager
def running(children: list[Child], while_starting: Callable[[], None] | None = None,
            ) -> Iterator[list[subprocess.Popen[bytes]]]:  # fmt: skip
    """Start every child at once, run ``while_starting`` meanwhile, wait until all are ready.

    Yields their ``Popen`` objects in order; on exit stops them (see ``stop``).
    """
    try:
        for child in children:
            child.start()
        if while_starting is not None:
            while_starting()
        for child in children:
            child.wait_ready()
        yield [child.proc for child in children if child.proc is not None]
    finally:
        stop([child.proc for child in reversed(children) if child.proc is not None])


def stop(procs: list[subprocess.Popen[bytes]], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM all of ``procs`` at once, then reap each, killing any that outlive ``grace_s``."""
    for proc in procs:
        proc.terminate()  # a no-op for one already reaped
    for proc in procs:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


LITELLM_PROXY_MODULES = (
    "litellm.proxy",
    "apscheduler",
    "backoff",
    "websockets",
    "orjson",
    "jwt",
    "fastapi_sso",
    "mcp",
)


def litellm_proxy_available() -> bool:
    """Whether ``litellm --config`` can start here: its proxy needs packages LiteLLM's own
    install does not bring (``pip install 'memproxy[bench]'``)."""
    import importlib.util

    return shutil.which("litellm") is not None and all(
        importlib.util.find_spec(name) is not None for name in LITELLM_PROXY_MODULES
    )


def litellm_proxy_child(port: int, models: list[dict[str, Any]], master_key: str, work: Path) -> Child:
    """LiteLLM's own proxy server as a user runs it: ``litellm --config <yaml> --port <port>``
    (one worker, its defaults); ready when ``/health/liveliness`` answers."""
    config = work / "litellm-proxy.yaml"
    config.write_text(yaml.safe_dump({"model_list": models}))
    args = [
        shutil.which("litellm") or "litellm",
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return Child(args, work / "litellm-proxy.log", f"http://127.0.0.1:{port}/health/liveliness",
                 env={"LITELLM_MASTER_KEY": master_key})  # fmt: skip
