"""Handles and settings for memproxy servers the tests start in-process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from memproxy.api.app import create_app
from memproxy.api.uvicorn_server import capped_http_protocol
from memproxy.config import Settings, settings_from_dict
from memproxy.testing.background_server import BackgroundServer

KEYS = [
    {"key": "mp-key-alpha-000000000001", "tenant": "alpha"},
    {"key": "mp-key-beta-0000000000002", "tenant": "beta"},
]


@dataclass
class Proxy:
    url: str
    settings: Settings
    data_dir: Path

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def client(self, token: str = "sk-test-user-a", **headers: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.v1, api_key=token, default_headers=headers, max_retries=0)

    def async_client(self, token: str = "sk-test-user-a", **headers: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.v1, api_key=token, default_headers=headers, max_retries=0)

    def http(self, token: str | None = "sk-test-user-a") -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def proxy_settings(upstream_url: str, data_dir: Path, **sections: dict[str, Any]) -> Settings:
    data: dict[str, Any] = {
        "storage": {"data_dir": str(data_dir)},
        "upstream": {
            "api_base": upstream_url,
            "timeout_s": 3,
            "models": [
                {
                    "name": "smart",
                    "litellm_params": {"model": "openai/aliased-model", "api_key": "sk-alias-own-key"},
                }
            ],
        },
        "server": {"max_body_bytes": 1024 * 1024},
        # The built-in hash embedder: instant and deterministic (tests/index runs the onnx model).
        "embedding": {"provider": "hash"},
        "extraction": {"model": "extractor", "poll_interval_s": 0.05, "backoff_base_s": 0.05},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return settings_from_dict(data)


def start_proxy(settings: Settings) -> tuple[BackgroundServer, Proxy]:
    # The header cap is the protocol ``memproxy serve`` uses, so in-process servers have it too.
    protocol = capped_http_protocol(settings.server.max_header_bytes)
    server = BackgroundServer(create_app(settings), http=protocol).start()
    return server, Proxy(server.url, settings, settings.storage.data_dir)
