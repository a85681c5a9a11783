"""``OPENAI_API_KEY=`` (set but empty, as ``docker run -e OPENAI_API_KEY`` and compose leave it
when the host has none) is no credential: /readyz says memory is degraded, as for an unset key
(issue 24 finding 8; LiteLLM alone counted the empty variable as a key)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memproxy.config import settings_from_dict
from memproxy.upstream.model_access import memory_credential_gaps
from tests.support.proxy import http_get, start_proxy


def test_an_empty_key_variable_is_a_credential_gap_and_stays_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    settings = settings_from_dict({"embedding": {"provider": "hash"}})
    (gap,) = memory_credential_gaps(settings)
    assert (gap.setting, gap.missing) == ("extraction.model", ("OPENAI_API_KEY",))
    assert os.environ["OPENAI_API_KEY"] == ""  # looked past, not removed
    monkeypatch.setenv("OPENAI_API_KEY", "   ")
    assert memory_credential_gaps(settings) == [gap]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set")
    assert memory_credential_gaps(settings) == []


def test_readyz_says_memory_is_degraded_with_an_empty_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    settings = settings_from_dict({
        "storage": {"data_dir": str(tmp_path)},
        "embedding": {"provider": "hash"},
        "upstream": {"timeout_s": 5},  # no api_base, no upstream.api_key: only the environment
    })  # fmt: skip
    server, proxy = start_proxy(settings)
    try:
        ready = http_get(proxy.url + "/readyz", timeout=10)
    finally:
        server.stop()
    assert ready.status_code == 200  # the proxy serves (callers' keys); memory is what cannot work
    memory = ready.json()["memory"]
    assert memory["status"] == "degraded"
    assert "no credentials for extraction.model 'gpt-4o-mini': set OPENAI_API_KEY" in memory["problems"][0]
