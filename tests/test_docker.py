"""What the Docker image relies on: a one-line answer for a data dir it cannot write, env
overrides with YAML values, a shutdown grace that fits in ``docker stop``'s 10 s, a health
check on the configured port, and the README's keyless ``docker run`` line. (No docker engine
here: the files are read, and the health check's command is run as docker would run it.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memproxy.cli import build_parser
from memproxy.config import load_settings
from memproxy.testing.background_server import free_port
from tests.support.proxy import Proxy

ROOT = Path(__file__).resolve().parent.parent
DOCKER_STOP_TIMEOUT_S = 10


@pytest.fixture
def read_only_data_dir() -> Iterator[Path]:
    """A data dir this test's child process cannot write (as ``nobody`` when we are root)."""
    base = Path(tempfile.mkdtemp(prefix="memproxy-ro-", dir="/tmp"))
    base.chmod(0o755)
    data = base / "data"
    data.mkdir()
    data.chmod(0o555)
    yield data
    data.chmod(0o755)
    shutil.rmtree(base)


def _unprivileged() -> list[str]:
    """A command prefix that makes the 0o555 dir unwritable for us: root keeps its uid (its
    interpreter lives under /root) but loses the capability to override file permissions."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without util-linux's setpriv")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--bounding-set", caps, "--inh-caps", caps, "--"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["serve", "worker"])
def test_an_unwritable_data_dir_is_one_line_not_a_traceback(read_only_data_dir: Path, command: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROXY_")}
    env.update(MEMPROXY_STORAGE__DATA_DIR=str(read_only_data_dir), MEMPROXY_SERVER__PORT="0",
               LITELLM_LOCAL_MODEL_COST_MAP="True")  # fmt: skip
    result = subprocess.run([*_unprivileged(), sys.executable, "-m", "memproxy", command], cwd="/", env=env,
                            capture_output=True, timeout=120, check=False)  # fmt: skip
    err = result.stderr.decode().strip()
    assert result.returncode == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"data dir {read_only_data_dir} is not writable" in err and "--user" in err


def test_env_overrides_take_yaml_values_not_only_scalars() -> None:
    environ = {
        "MEMPROXY_AUTH__MODE": "keys",
        "MEMPROXY_AUTH__KEYS": "[{key: mp-key-from-env-0000001, tenant: team-a}]",
        "MEMPROXY_UPSTREAM__MODELS": '[{"name": "smart", "litellm_params": {"model": "openai/gpt-4o"}}]',
        "MEMPROXY_SERVER__PORT": "9000",
    }
    settings = load_settings(None, environ)
    assert [(k.key, k.tenant) for k in settings.auth.keys] == [("mp-key-from-env-0000001", "team-a")]
    assert settings.upstream.models[0].litellm_params == {"model": "openai/gpt-4o"}
    assert settings.server.port == 9000


def test_the_image_shutdown_grace_fits_in_docker_stop() -> None:
    """docker stop sends SIGKILL after 10 s; memproxy needs the grace plus time to stop the
    worker and write snapshots, so the image's grace must leave a margin."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    match = re.search(r"MEMPROXY_SERVER__SHUTDOWN_GRACE_S=(\d+(?:\.\d+)?)", dockerfile)
    assert match, "the image must set its shutdown grace explicitly"
    assert float(match.group(1)) <= DOCKER_STOP_TIMEOUT_S - 2


def _healthcheck_command() -> str:
    """The image's HEALTHCHECK CMD, continuation lines joined, as docker hands it to a shell."""
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [line for line in dockerfile.splitlines() if line.startswith("HEALTHCHECK ")]
    return line.split(" CMD ", 1)[1].strip()


def test_the_health_check_asks_the_port_the_server_was_given(proxy: Proxy) -> None:
    """Run exactly the image's check against a real memproxy: it must follow
    MEMPROXY_SERVER__PORT (a literal 8080 fails as soon as someone changes the port)."""
    port = proxy.url.rsplit(":", 1)[1]
    env = {"PATH": os.environ["PATH"], "MEMPROXY_SERVER__PORT": port}
    check = subprocess.run(["sh", "-c", _healthcheck_command()], env=env, capture_output=True, timeout=30,
                           check=False)  # fmt: skip
    assert check.returncode == 0, check.stderr.decode()
    nobody = str(free_port())  # nothing listens there: the check must fail, not pass on another port
    failed = subprocess.run(["sh", "-c", _healthcheck_command()], capture_output=True, timeout=30, check=False,
                            env={**env, "MEMPROXY_SERVER__PORT": nobody})  # fmt: skip
    assert failed.returncode != 0


def test_the_readme_has_a_keyless_docker_recipe() -> None:
    readme = (ROOT / "README.md").read_text()
    line = "docker run --rm -p 8080:8080 memproxy memproxy serve --offline"
    assert line in readme
    assert "docker build -t memproxy ." in readme  # the image name the line runs
    args = build_parser().parse_args(line.split("memproxy memproxy ", 1)[1].split())
    assert args.command == "serve" and args.offline
