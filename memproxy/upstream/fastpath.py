"""Which routes skip LiteLLM: OpenAI-compatible endpoints, relayed by ``memproxy.upstream.relay``.

LiteLLM still decides where a model name goes (``Upstream.route``: ``upstream.api_base``,
``upstream.models`` aliases, provider prefixes, keys) and which provider that is
(``litellm.get_llm_provider``). When that provider speaks OpenAI's wire format at a known
base URL, ``FastPaths.route`` returns a ``FastRoute`` and the caller sends the body itself.

Invariants:
- Routing comes only from server config and LiteLLM's provider table, never from the
  request body: a body's ``api_base``, ``api_key`` or ``custom_llm_provider`` is a plain
  JSON field that the provider receives, exactly as on the LiteLLM path.
- A route is fast only when every option it carries is one the relay honours
  (``_HONOURED``); an alias with anything else (extra headers, ``api_version``, …) and
  every provider not in ``_OPENAI_WIRE`` (Azure, Bedrock, Vertex, Gemini, Ollama's own
  ``/api/chat``, …) keeps LiteLLM's translation. Anthropic is fast for ``/v1/messages``
  only (``messages_route``: its own API, relayed as is), never for chat.
- Passthrough keeps its meaning: the caller's token is the provider key unless an alias
  carries its own; in keys mode the server's ``upstream.api_key`` or the provider's env var.
- Every route, cached or not, first passes ``Upstream.route`` with the caller's credential
  (the allow-list); the cache holds only where a model goes, never whether this caller may.
- ``upstream.fast_path: off`` makes ``route`` always None.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from memproxy.auth import Credential
from memproxy.upstream.provider import Upstream

# Provider → (default base URL when LiteLLM names none, env vars for its key, env vars for its base).
_OPENAI_WIRE: dict[str, tuple[str | None, tuple[str, ...], tuple[str, ...]]] = {
    "openai": ("https://api.openai.com/v1", ("OPENAI_API_KEY",), ("OPENAI_BASE_URL", "OPENAI_API_BASE")),
    "openrouter": ("https://openrouter.ai/api/v1", ("OPENROUTER_API_KEY", "OR_API_KEY"), ("OPENROUTER_API_BASE",)),
    "groq": (None, ("GROQ_API_KEY",), ()),
    "together_ai": (None, ("TOGETHERAI_API_KEY", "TOGETHER_API_KEY", "TOGETHER_AI_API_KEY"), ()),
    "fireworks_ai": (None, ("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY", "FIREWORKSAI_API_KEY"), ()),
    "deepseek": (None, ("DEEPSEEK_API_KEY",), ()),
    "mistral": (None, ("MISTRAL_API_KEY",), ()),
    "hosted_vllm": (None, ("HOSTED_VLLM_API_KEY",), ()),
    "lm_studio": (None, ("LM_STUDIO_API_KEY",), ("LM_STUDIO_API_BASE",)),
    "llamafile": (None, ("LLAMAFILE_API_KEY",), ()),
}  # fmt: skip
# Anthropic's own wire, for ``/v1/messages`` only (chat to Anthropic needs LiteLLM's translation).
_ANTHROPIC_WIRE = (
    "https://api.anthropic.com",
    ("ANTHROPIC_API_KEY",),
    ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
)
# Route options the relay honours; any other (from an alias) sends the request through LiteLLM.
_HONOURED = frozenset({"model", "api_base", "api_key", "custom_llm_provider", "timeout", "max_retries"})
# Model names are client-chosen: the resolution cache is bounded.
_CACHE_MAX = 1024


@dataclass(frozen=True)
class FastRoute:
    """Where and how to send an OpenAI-wire request: ``{base_url}/chat/completions``."""

    provider: str
    base_url: str  # without a trailing slash
    model: str  # the name the provider knows the model by (prefix and alias resolved)
    api_key: str | None
    timeout_s: float


@dataclass(frozen=True)
class _Resolved:
    provider: str
    base_url: str
    model: str
    key: str | None  # the route's own key (an alias's, or upstream.api_key), or the env's


class FastPaths:
    def __init__(self, upstream: Upstream, mode: str) -> None:
        self._upstream = upstream
        self._enabled = mode == "auto"
        self._cache: dict[str, _Resolved | None] = {}

    def route(self, model: str, credential: Credential | None) -> FastRoute | None:
        """The OpenAI-wire route for ``model``, or None when the request must go through LiteLLM."""
        return self._route(model, credential, anthropic=False)

    def messages_route(self, model: str, credential: Credential | None) -> FastRoute | None:
        """For ``/v1/messages``: the route when ``model`` is Anthropic's (its own Messages API)."""
        return self._route(model, credential, anthropic=True)

    def _route(self, model: str, credential: Credential | None, *, anthropic: bool) -> FastRoute | None:
        if not self._enabled:
            return None
        # The allow-list first, with this caller's credential: the cached resolution below is
        # credential-independent and must never decide whose key goes where.
        target = self._upstream.route(model, credential)
        if model in self._cache:
            resolved = self._cache[model]
        else:
            resolved = self._resolve(model)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[model] = resolved
        if resolved is None or (resolved.provider == "anthropic") != anthropic:
            return None
        key = target.get("api_key") or resolved.key
        timeout = float(target.get("timeout") or self._upstream.timeout_s)
        return FastRoute(resolved.provider, resolved.base_url, resolved.model, key, timeout)

    def stored_route(self, credential: Credential | None) -> FastRoute | None:
        """Where stored Responses (``GET``/``DELETE /v1/responses/{id}``) live: OpenAI's, or
        ``upstream.api_base``'s (as on the LiteLLM path); None when the fast path is off."""
        if not self._enabled:
            return None
        target = self._upstream.endpoint(credential)
        default_base, key_vars, base_vars = _OPENAI_WIRE["openai"]
        base = target.get("api_base") or _first_env(base_vars) or default_base
        key = target.get("api_key") or _first_env(key_vars)
        timeout = float(target.get("timeout") or self._upstream.timeout_s)
        return FastRoute("openai", str(base).rstrip("/"), "", key, timeout)

    def _resolve(self, model: str) -> _Resolved | None:
        """Credential-independent part of the route (the key is added per request)."""
        target = self._upstream.route(model, None)
        if not set(target) <= _HONOURED:
            return None
        try:
            name, provider, env_key, base = self._upstream.litellm.get_llm_provider(
                model=target["model"],
                custom_llm_provider=target.get("custom_llm_provider"),
                api_base=target.get("api_base"),
                api_key=target.get("api_key"),
            )
        except Exception:  # LiteLLM cannot route it either: let it say so on its path
            return None
        wire = _ANTHROPIC_WIRE if provider == "anthropic" else _OPENAI_WIRE.get(str(provider))
        if wire is None:
            return None
        default_base, key_vars, base_vars = wire
        base = target.get("api_base") or base or _first_env(base_vars) or default_base
        if not base:
            return None
        if provider == "anthropic":  # LiteLLM accepts the endpoint's full URL as its base
            base = str(base).rstrip("/").removesuffix("/v1/messages").removesuffix("/v1")
        key = target.get("api_key") or env_key or _first_env(key_vars)
        return _Resolved(str(provider), str(base).rstrip("/"), str(name), key)


def _first_env(names: tuple[str, ...]) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def describe(route: FastRoute | None) -> dict[str, Any]:
    """For logs and tests: the route without its key."""
    if route is None:
        return {"path": "litellm"}
    return {"path": "fast", "provider": route.provider, "base_url": route.base_url, "model": route.model}
