"""Handles and settings for memproxy servers the tests start in-process."""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from memproxy.api.app import create_app
from memproxy.api.uvicorn_server import capped_http_protocol
from memproxy.config import Settings, settings_from_dict
from memproxy.testing.background_server import BackgroundServer

# A client's default TLS context costs ~25 ms to build (it loads the CA bundle), more than most
# requests here take; every test speaks plain HTTP on 127.0.0.1, so one context serves them all.
# Build clients with ``verify=TLS`` (``http_client``, ``openai_client``, ``anthropic_client``).
TLS = ssl.create_default_context()

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
        return openai_client(self.v1, token, **headers)

    def async_client(self, token: str = "sk-test-user-a", **headers: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.v1,
            api_key=token,
            default_headers=headers,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(verify=TLS),
        )

    def http(self, token: str | None = "sk-test-user-a") -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return http_client(base_url=self.url, headers=headers, timeout=30)


def http_client(**options: Any) -> httpx.Client:
    """``httpx.Client(**options)`` with the shared TLS context."""
    return httpx.Client(verify=TLS, **options)


def http_get(url: str, **options: Any) -> httpx.Response:
    """``httpx.get`` with the shared TLS context."""
    with http_client() as http:
        return http.get(url, **options)


def openai_client(base_url: str, token: str, **headers: str) -> openai.OpenAI:
    """The real OpenAI SDK (its default HTTP client, the shared TLS context), no retries."""
    return openai.OpenAI(
        base_url=base_url,
        api_key=token,
        default_headers=headers,
        max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=TLS),
    )


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


def stop_together(servers: list[BackgroundServer]) -> None:
    """Stop ``servers`` at once: each stop waits out uvicorn's shutdown (~0.2 s), so one after
    another a handful of them took a second."""
    threads = [threading.Thread(target=server.stop) for server in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
