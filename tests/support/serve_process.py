"""``python -m memproxy serve|worker --config <yaml>`` as a real subprocess, for tests that need
signals, exit codes or a crash.

A ``ServeProcess`` owns two things: the child process and its log file (stdout and stderr,
appended, so a restart on the same log keeps the first run's lines). Leaving its ``with``
block always reaps the child, with SIGKILL if it still runs, and closes the log: no test
leaves a server or an open file behind, whether it passed or failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx
import yaml

from memproxy.config import Settings
from tests.support.memory_flow import wait_until

Command = Literal["serve", "worker", "fake-upstream"]


def write_config(path: Path, settings: Settings | dict[str, Any]) -> Path:
    """Write ``settings`` as the YAML file ``--config`` reads; returns ``path``."""
    data = settings.model_dump(mode="json") if isinstance(settings, Settings) else dict(settings)
    # Subprocess servers use the instant hash embedder unless a test asks for another (the
    # default, onnx, loads a model at every start; tests/index exercises it).
    data.setdefault("embedding", {"provider": "hash"})
    path.write_text(yaml.safe_dump(data))
    return path


class ServeProcess:
    def __init__(
        self,
        command: Command,
        config: Path | None,
        log: Path,
        *,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        """``args`` follow the command; ``env`` replaces the environment (the cost-map pin is kept)."""
        self.command = command
        self.log = log
        self._log_file = log.open("ab")
        env = {**(os.environ if env is None else env), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        argv = [sys.executable, "-m", "memproxy", command, *args]
        if config is not None:
            argv += ["--config", str(config)]
        try:
            self.process = subprocess.Popen(
                argv, stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        except BaseException:
            self._log_file.close()
            raise

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.kill()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, url: str, timeout: float = 60.0) -> None:
        """Poll ``url``/readyz until 200; fails with the log if the process exits or time runs out."""

        def ready() -> bool:
            assert self.process.poll() is None, f"memproxy {self.command} exited early:\n{self.log_text()}"
            try:
                return httpx.get(url + "/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_until(ready, timeout=timeout, interval=0.05)
        except AssertionError as failure:
            if self.process.poll() is not None:
                raise  # the message already carries the log
            raise AssertionError(f"{failure}: memproxy {self.command} not ready\n{self.log_text()}") from None

    def send_signal(self, sig: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        """The exit code; if the process is still running after ``timeout``, fail with every
        thread's stack (``memproxy`` dumps them on SIGUSR1) and the log, so a hang says where."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.send_signal(signal.SIGUSR1)
            try:
                self.process.wait(2)
            except subprocess.TimeoutExpired:
                pass
            raise AssertionError(
                f"memproxy {self.command} still running {timeout}s later; stacks and log:\n{self.log_text()}"
            ) from None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send ``sig`` (if the process still runs) and return its exit code."""
        self.send_signal(sig)
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL if still running, reap, close the log; safe to call more than once."""
        try:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(30)
        finally:
            self._log_file.close()
