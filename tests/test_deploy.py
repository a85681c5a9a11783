"""``deploy/compose.yaml``: every memproxy service's environment is a valid config on Postgres."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from memproxy.config import load_settings

COMPOSE = Path(__file__).resolve().parent.parent / "deploy" / "compose.yaml"


def test_compose_runs_two_replicas_and_a_worker_on_one_postgres() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    memproxy = {name: s for name, s in services.items() if s.get("image") == "memproxy"}
    assert sorted(memproxy) == ["replica-a", "replica-b", "worker"]
    urls = set()
    for name, service in memproxy.items():
        env = {k: re.sub(r"\$\{[^}]*\}", "x", str(v)) for k, v in service["environment"].items()}
        settings = load_settings(None, environ=env)
        assert settings.storage.url and settings.storage.url.endswith("@postgres:5432/memproxy")
        urls.add(settings.storage.url)
        assert settings.extraction.worker_enabled == (name == "worker")
        assert service["volumes"][0].endswith(":/data")  # each keeps its own snapshots
    assert len(urls) == 1 and "postgres" in services
    assert memproxy["worker"]["command"] == ["memproxy", "worker"]


def test_the_postgres_password_comes_from_the_environment_never_the_file() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    required = re.compile(r"\$\{POSTGRES_PASSWORD:\?[^}]+\}")  # compose refuses to start without it
    assert required.fullmatch(services["postgres"]["environment"]["POSTGRES_PASSWORD"])
    for name in ("replica-a", "replica-b", "worker"):
        url = services[name]["environment"]["MEMPROXY_STORAGE__URL"]
        assert required.search(url), url
        resolved = required.sub("s3cret-From-env", url)
        assert load_settings(None, environ={"MEMPROXY_STORAGE__URL": resolved}).storage.url == resolved
    assert "memproxy:memproxy@" not in COMPOSE.read_text()
    example = (COMPOSE.parent / ".env.example").read_text()
    assert re.search(r"^POSTGRES_PASSWORD=$", example, re.M)  # a name to fill in, no password
    assert "deploy/.env" in (COMPOSE.parent.parent / ".gitignore").read_text().splitlines()
