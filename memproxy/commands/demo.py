"""``memproxy demo``: capture in one conversation, recall in the next — fully offline.

Starts the bundled scripted upstream (a fake OpenAI-compatible provider with a rule-based
extractor) and memproxy (``hash`` embedder, a temporary data dir) on loopback ports in
this process, talks to memproxy with the real OpenAI SDK, prints each step and removes
everything it made. No API key or network access is needed.

Exit status: 0 when the second conversation was answered with both facts recalled,
1 otherwise.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

USER_ID = "ana"
TOKEN = "demo-key"
FIRST_TURN = "Hi! My name is Ana. I live in Lisbon."
SECOND_TURN = "What is my name, and where do I live?"
EXPECTED = ("Ana", "Lisbon")
MEMORY_WAIT_S = 20.0


def _say(text: str = "") -> None:
    print(text, flush=True)


def demo_settings(upstream_url: str, data_dir: Path) -> Any:
    from memproxy.config import settings_from_dict

    return settings_from_dict(
        {
            "storage": {"data_dir": str(data_dir)},
            "upstream": {"api_base": upstream_url, "timeout_s": 10},
            "embedding": {"provider": "hash"},
            "extraction": {"model": "demo-extractor", "poll_interval_s": 0.05, "backoff_base_s": 0.1},
        }
    )


def _chat(base_url: str, session: str, text: str) -> tuple[str, dict[str, str]]:
    import openai

    client = openai.OpenAI(
        base_url=base_url + "/v1",
        api_key=TOKEN,
        max_retries=0,
        default_headers={"X-Memproxy-User-Id": USER_ID, "X-Memproxy-Session-Id": session},
    )
    raw = client.chat.completions.with_raw_response.create(
        model="demo-model", messages=[{"role": "user", "content": text}]
    )
    answer = raw.parse().choices[0].message.content or ""
    return answer, dict(raw.headers)


def _wait_for_memories(base_url: str, want: int) -> list[dict[str, Any]]:
    """Poll the memory API until the worker has stored ``want`` memories (or time is up)."""
    deadline = time.monotonic() + MEMORY_WAIT_S
    memories: list[dict[str, Any]] = []
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as http:
        while time.monotonic() < deadline:
            response = http.get("/v1/memories", params={"user_id": USER_ID})
            if response.status_code == 200:
                memories = list(response.json().get("data", []))
                if len(memories) >= want:
                    break
            time.sleep(0.1)
    return memories


def _show_forwarded(body: dict[str, Any]) -> None:
    _say("What memproxy sent to the model:")
    for message in body.get("messages", []):
        role = str(message.get("role"))
        for i, line in enumerate(str(message.get("content") or "").splitlines() or [""]):
            _say(f"    {role + ':' if i == 0 else '':<10} {line}")


def _conversations(base_url: str, last_forwarded: Callable[[], dict[str, Any]]) -> bool:
    _say("1) First conversation (session 'monday'): the user states two facts.")
    _say(f"   user:      {FIRST_TURN}")
    answer, headers = _chat(base_url, "monday", FIRST_TURN)
    _say(f"   assistant: {answer}")
    _say(f"   (queued for memory extraction as job {headers.get('x-memproxy-capture', '?')})")
    _say()
    _say("2) The background worker turns the turn into memories (GET /v1/memories):")
    memories = _wait_for_memories(base_url, want=len(EXPECTED))
    for memory in memories:
        _say(f"   - {memory['text']}   [source={memory['source']}, session={memory['session_id']}]")
    if not memories:
        _say("   (none yet)")
    _say()
    _say("3) A new conversation (session 'friday'): memproxy recalls the memories.")
    _say(f"   user:      {SECOND_TURN}")
    answer, headers = _chat(base_url, "friday", SECOND_TURN)
    recalled = headers.get("x-memproxy-recalled", "0")
    _say(f"   assistant: {answer}")
    _say(f"   (X-Memproxy-Recalled: {recalled})")
    _say()
    _show_forwarded(last_forwarded())
    _say()
    remembered = answer.split("I remember:", 1)[-1] if "I remember:" in answer else ""
    return all(fact in remembered for fact in EXPECTED)


def run_demo() -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    started = time.monotonic()
    _say("memproxy demo — offline: a scripted model, the built-in 'hash' embedder, a temporary data dir.")
    _say()
    from memproxy.api.app import create_app
    from memproxy.testing.background_server import BackgroundServer
    from memproxy.testing.scripted_upstream import ScriptedUpstream

    fake = ScriptedUpstream()
    with (
        tempfile.TemporaryDirectory(prefix="memproxy-demo-") as data_dir,
        BackgroundServer(fake.app) as upstream,
    ):
        settings = demo_settings(upstream.url + "/v1", Path(data_dir))
        with BackgroundServer(create_app(settings)) as proxy:
            ok = _conversations(proxy.url, lambda: fake.last_chat().body)
    seconds = time.monotonic() - started
    if ok:
        _say(
            f"OK: the second conversation used both facts ({', '.join(EXPECTED)}). Finished in {seconds:.1f} s;"
        )
        _say("the temporary data dir has been removed. Next: `memproxy serve` with your provider key.")
        return 0
    _say(f"FAILED: the second answer did not use the remembered facts ({seconds:.1f} s).")
    return 1


if __name__ == "__main__":
    sys.exit(run_demo())
