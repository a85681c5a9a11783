"""Trying memproxy with one's own client and no provider key, through the real CLI.

``memproxy serve --offline`` and the README's two-process recipe (``memproxy fake-upstream``
plus ``MEMPROXY_UPSTREAM__API_BASE=… memproxy serve``): a fact said in one conversation is
extracted by the worker and recalled in the next, with the real OpenAI SDK as the client.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.memory_flow import wait_until
from tests.support.serve_process import ServeProcess, write_config

LISTENING = re.compile(r"memproxy listening on (http://127\.0\.0\.1:\d+)")
FAKE_LISTENING = re.compile(r"fake upstream .* listening on (http://127\.0\.0\.1:\d+)/v1")


def _keyless_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("MEMPROXY_")
    }


def _config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config.yaml", {
        "server": {"port": 0},
        "storage": {"data_dir": str(tmp_path / "data")},
        "extraction": {"poll_interval_s": 0.05},
    })  # fmt: skip


def _remember_then_recall(url: str) -> None:
    client = openai.OpenAI(base_url=url + "/v1", api_key="anything", max_retries=0,
                           default_headers={"X-Memproxy-User-Id": "ana"})  # fmt: skip
    first = client.chat.completions.create(
        model="my-model", messages=[{"role": "user", "content": "Hi! My name is Ana. I live in Lisbon."}]
    )
    assert first.choices[0].message.content == "You said: Hi! My name is Ana. I live in Lisbon."

    def stored() -> list[str]:
        response = httpx.get(url + "/v1/memories", params={"user_id": "ana"},
                             headers={"Authorization": "Bearer anything"}, timeout=10)  # fmt: skip
        return [m["text"] for m in response.json()["data"]]

    assert sorted(wait_until(lambda: texts if len(texts := stored()) == 2 else None, timeout=60)) == [
        "User lives in Lisbon", "User's name is Ana"
    ]  # fmt: skip
    stream = client.chat.completions.create(
        model="my-model", messages=[{"role": "user", "content": "Where do I live?"}], stream=True
    )
    answer = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert "I remember:" in answer and "User lives in Lisbon" in answer


@pytest.mark.slow
def test_serve_offline_remembers_and_recalls_without_a_key(tmp_path: Path) -> None:
    with ServeProcess("serve", _config(tmp_path), tmp_path / "serve.log", args=["--offline"],
                      env=_keyless_env()) as server:  # fmt: skip
        url = wait_until(lambda: LISTENING.search(server.log_text()), timeout=60).group(1)
        assert "OFFLINE mode" in server.log_text()
        _remember_then_recall(url)
        assert server.stop() == 0


@pytest.mark.slow
def test_the_readme_recipe_fake_upstream_plus_serve(tmp_path: Path) -> None:
    env = _keyless_env()
    with ServeProcess("fake-upstream", None, tmp_path / "fake.log", args=["--port", "0"], env=env) as fake:
        base = wait_until(lambda: FAKE_LISTENING.search(fake.log_text()), timeout=60).group(1)
        serve_env = {**env, "MEMPROXY_UPSTREAM__API_BASE": base + "/v1"}
        with ServeProcess("serve", _config(tmp_path), tmp_path / "serve.log", env=serve_env) as server:
            url = wait_until(lambda: LISTENING.search(server.log_text()), timeout=60).group(1)
            _remember_then_recall(url)
            assert server.stop() == 0
        assert fake.stop() == 0
