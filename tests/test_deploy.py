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
