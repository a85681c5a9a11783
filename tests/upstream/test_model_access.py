"""Missing credentials for memory's own model calls are found at start, not job by job.

Without a server-side key the proxy still answers (passthrough forwards the caller's key),
but every extraction job used to fail until dead with "Missing credentials" while /readyz
said ready and nothing was logged.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from memproxy.config import settings_from_dict
from memproxy.upstream.model_access import memory_credential_gaps
from tests.support.memory_flow import wait_until
from tests.support.proxy import http_get, start_proxy


def _settings(**sections: dict[str, Any]) -> Any:
    sections.setdefault("embedding", {"provider": "hash"})  # ready at once (onnx loads a model first)
    return settings_from_dict(sections)


def test_the_extraction_model_needs_a_key_from_the_server() -> None:
    (gap,) = memory_credential_gaps(_settings(), environ={})
    assert (gap.setting, gap.model, gap.missing) == ("extraction.model", "gpt-4o-mini", ("OPENAI_API_KEY",))
    assert "set OPENAI_API_KEY" in gap.message() and "upstream.api_key" in gap.message()
    assert memory_credential_gaps(_settings(), environ={"OPENAI_API_KEY": "sk-x"}) == []
    assert memory_credential_gaps(_settings(upstream={"api_key": "sk-x"}), environ={}) == []
    (claude,) = memory_credential_gaps(_settings(extraction={"model": "anthropic/claude-3-5-haiku-latest"}),
                                       environ={"OPENAI_API_KEY": "sk-x"})  # fmt: skip
    assert claude.missing == ("ANTHROPIC_API_KEY",)


def test_aliases_and_a_keyless_base_url() -> None:
    alias = {"models": [{"name": "memory-model", "litellm_params": {"model": "openai/gpt-4o-mini",
                                                                     "api_key": "sk-alias"}}]}  # fmt: skip
    assert (
        memory_credential_gaps(_settings(upstream=alias, extraction={"model": "memory-model"}), environ={})
        == []
    )
    # A keyless OpenAI-compatible base URL: extraction sends a placeholder key; the embedder sends none.
    local = _settings(upstream={"api_base": "http://127.0.0.1:1/v1"}, embedding={"provider": "litellm"})
    (embedding,) = memory_credential_gaps(local, environ={})
    assert (embedding.setting, embedding.model) == ("embedding.model", "text-embedding-3-small")


def test_readyz_says_memory_is_degraded_and_the_job_names_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    caplog.set_level(logging.WARNING, logger="memproxy.model_access")
    settings = _settings(
        storage={"data_dir": str(tmp_path)},
        upstream={"timeout_s": 5},  # no api_base, no key: extraction has no credentials
        extraction={"max_attempts": 1, "poll_interval_s": 0.05},
    )
    server, proxy = start_proxy(settings)
    try:
        assert any("MEMORY DEGRADED" in r.getMessage() and "OPENAI_API_KEY" in r.getMessage()
                   for r in caplog.records)  # fmt: skip
        ready = http_get(proxy.url + "/readyz", timeout=10)
        assert ready.status_code == 200  # the proxy itself serves; memory is what is degraded
        memory = ready.json()["memory"]
        assert memory["status"] == "degraded"
        assert "extraction.model 'gpt-4o-mini'" in memory["problems"][0]
        with proxy.http(f"sk-{uuid.uuid4().hex}") as http:
            queued = http.post("/v1/memories", json={"user_id": "u", "messages": [
                {"role": "user", "content": "I live in Oslo"}]})  # fmt: skip
            assert queued.status_code == 202
            job_id = queued.json()["job_id"]
            dead = wait_until(lambda: (j := http.get(f"/v1/jobs/{job_id}").json())["status"] == "dead" and j,
                              timeout=60)  # fmt: skip
        assert "no credentials for extraction.model 'gpt-4o-mini': set OPENAI_API_KEY" in dead["last_error"]
    finally:
        server.stop()


def test_readyz_says_memory_ok_when_credentials_are_there(tmp_path: Path) -> None:
    settings = _settings(storage={"data_dir": str(tmp_path)}, upstream={"api_key": "sk-server"})
    server, proxy = start_proxy(settings)
    try:
        assert http_get(proxy.url + "/readyz", timeout=10).json() == {
            "status": "ready",
            "memory": {"status": "ok"},
        }
    finally:
        server.stop()
