"""Trying memproxy without a provider key: ``memproxy serve --offline`` and ``memproxy fake-upstream``.

Both use the scripted stand-in for a provider that the demo and the tests use
(``memproxy.testing.scripted_upstream``): an OpenAI-compatible server whose answers echo the
user and list the memories it was given (``You said: … | I remember: …``), and whose
extraction answers come from a rule-based extractor ("My name is Ana", "I live in Lisbon",
"I like jazz", "Remember that my cat is called Miso" → "User's cat is called Miso"; a question
is never a fact). It refuses what OpenAI refuses (an unknown role, a content that is neither
text nor parts, a parameter of the wrong type: a 400 in OpenAI's shape), so a client bug shows
here first. So a user's own client, pointed at a real memproxy, sees memory captured,
extracted and recalled end to end, with no key and no network.

Invariants:
- Offline mode only redirects where model calls go (``upstream.api_base``); the data dir,
  auth, recall and capture are the configured ones, so what is tried is what will run.
- The stand-in runs in this process on a loopback port and stops when ``serve`` returns.
- Every start says loudly that answers come from a script, not a model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from memproxy.config import ServerSettings, Settings

log = logging.getLogger("memproxy.offline")

SCRIPTED = "scripted stand-in, not a model: answers echo you and list the memories they were given"


@contextmanager
def offline_upstream(settings: Settings) -> Iterator[str]:
    """Run the scripted upstream on a free loopback port and point ``settings`` at it."""
    from memproxy.testing.background_server import BackgroundServer
    from memproxy.testing.scripted_upstream import ScriptedUpstream

    with BackgroundServer(ScriptedUpstream().app) as fake:
        url = fake.url + "/v1"
        settings.upstream.api_base = url
        log.warning("OFFLINE mode: model calls go to %s (%s); %s", url, SCRIPTED, who_may_call(settings))
        yield url


def who_may_call(settings: Settings) -> str:
    """What a client needs in offline mode: the configured auth still holds."""
    if settings.auth.mode == "passthrough":
        return "no provider key is needed: any bearer token works (each token is its own tenant)"
    return (f"no provider key is needed, but auth.mode is keys: clients need one of the "
            f"{len(settings.auth.keys)} configured auth.keys (another gets 401)")  # fmt: skip


def run_fake_upstream(host: str, port: int) -> int:
    """``memproxy fake-upstream``: the scripted provider alone, in the foreground."""
    from memproxy.api.uvicorn_server import serve
    from memproxy.testing.scripted_upstream import ScriptedUpstream

    settings = Settings(server=ServerSettings(host=host, port=port))
    recipe = (f"fake upstream ({SCRIPTED}) listening on {{url}}/v1 - point memproxy at it with "
              "MEMPROXY_UPSTREAM__API_BASE={url}/v1 memproxy serve")  # fmt: skip
    return serve(ScriptedUpstream().app, settings, announce=recipe)
