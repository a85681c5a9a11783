"""The provider side: every call to a model goes through LiteLLM from here.

Invariants:
- Fields LiteLLM knows as OpenAI parameters are passed as keyword arguments (and
  whitelisted with ``allowed_openai_params`` so none is refused or dropped); every other
  body field travels in ``extra_body``, so a client can never set LiteLLM's own options
  (``api_base``, ``api_key``, ``mock_response``, ``metadata`` …) through the request body.
- ``upstream.api_base`` sends every call to that base URL whatever the model name;
  ``upstream.models`` aliases bring their own ``litellm_params`` (and key).
- ``route`` is the allow-list every client request passes (chat on both paths, Responses,
  Messages, embeddings; ``model`` and ``models`` and ``endpoint`` apply the same rules),
  before any network call. When the server's credentials pay (``keys`` mode, or a provider
  that signs with the machine's own cloud credentials), a request reaches only what the
  operator configured: ``upstream.api_base``, an ``upstream.models`` alias, or a provider in
  ``upstream.allow_providers`` (LiteLLM proxy's rule: only its ``model_list``, with
  ``provider/*`` entries for whole providers). A caller's own key (passthrough) may go to any
  provider except to a local destination (loopback, private, link-local: ``egress``) the
  operator did not configure. memproxy's own address is refused whatever the configuration
  (a call to itself is a loop). Anything else: 400 ``model_not_found``.
- A model name is checked (``egress.unsafe_id``) before it can reach a URL: no ``..``
  segment or percent-encoded separator reaches a provider path.
- ``credential=None`` is memproxy's own call (the extraction worker): its model is the
  operator's ``extraction.model``, so it is not checked.
- LiteLLM is imported lazily (it is slow to import), after pinning its cost map to the
  local copy so start-up never needs the network.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from memproxy.auth import Credential
from memproxy.config import ConfigError, ServerSettings, UpstreamSettings
from memproxy.errors import ApiError, error_type_for
from memproxy.upstream import egress

# Chat-completion parameters of the OpenAI API that LiteLLM maps itself.
OPENAI_CHAT_PARAMS = frozenset(
    {
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "presence_penalty",
        "response_format",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "functions",
        "function_call",
        "modalities",
        "audio",
        "prediction",
        "reasoning_effort",
        "service_tier",
        "store",
        "web_search_options",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
    }
)
EMBEDDING_PARAMS = frozenset({"encoding_format", "dimensions", "user"})
OPENAI_BASE = "https://api.openai.com/v1"
# Model names are client-chosen: the destination cache is bounded.
_CACHE_MAX = 1024


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a route connects, as far as it can be known without calling it."""

    provider: str | None  # LiteLLM's provider name; None when LiteLLM knows none
    url: str | None  # the base URL, when known (LiteLLM builds some from regions and ids)
    chosen: bool  # the operator named it: api_base, an alias's, or the provider's *_API_BASE


def import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    _quiet_litellm_logging()
    return litellm


def _quiet_litellm_logging() -> None:
    """LiteLLM logs two INFO lines per call through its own stderr handler: one line per
    request is the access log's job. Keep its warnings, in our format (plain or JSON)."""
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.WARNING)


class Upstream:
    def __init__(self, settings: UpstreamSettings, server: ServerSettings | None = None) -> None:
        self._settings = settings
        self._aliases = {alias.name: dict(alias.litellm_params) for alias in settings.models}
        self._litellm = import_litellm()
        known = {str(getattr(p, "value", p)) for p in self._litellm.provider_list}
        unknown = sorted(set(settings.allow_providers) - known)
        if unknown:
            raise ConfigError(
                f"upstream.allow_providers: {', '.join(unknown)} is not a LiteLLM provider name "
                "(e.g. openai, anthropic, groq, ollama)"
            )
        self._allowed = frozenset(settings.allow_providers)
        # Port 0 (a test's ephemeral port) is never a destination's port.
        self._own = (server.host, server.port) if server is not None and server.port else None
        self._destinations: dict[str, Destination] = {}

    @property
    def litellm(self) -> Any:
        """The imported ``litellm`` module (its provider table decides the fast path)."""
        return self._litellm

    @property
    def timeout_s(self) -> float:
        return self._settings.timeout_s

    def route(self, model: str, credential: Credential | None) -> dict[str, Any]:
        """Where a model name goes: model, base URL, key and timeout for LiteLLM.

        Raises ``ApiError`` 400 when ``credential``'s caller may not go there (module doc)."""
        target: dict[str, Any] = {"timeout": self._settings.timeout_s, "max_retries": 0}
        alias = self._aliases.get(model)
        if alias is not None:
            target.update(alias)
        else:
            target["model"] = model
        if self._settings.api_base and "api_base" not in target:
            target["api_base"] = self._settings.api_base
            target.setdefault("custom_llm_provider", "openai")
        if credential is not None:
            self._admit(model, target, credential, configured=alias is not None)
        self._add_key(target, credential)
        return target

    def endpoint(
        self, credential: Credential | None, provider: str = "openai", *, name: str | None = None
    ) -> dict[str, Any]:
        """Base URL, key and timeout of a call that names no model (stored Responses, the
        model list): ``upstream.api_base``'s, else ``provider``'s, under ``route``'s rules
        (``name``: what the caller asked for, for the error)."""
        target: dict[str, Any] = {"timeout": self._settings.timeout_s, "max_retries": 0}
        shown = name if name is not None else provider
        if self._settings.api_base:
            target["api_base"] = self._settings.api_base
            target["custom_llm_provider"] = "openai"
            self._refuse_self(self._settings.api_base, shown)
        elif credential is not None:
            self._admit_destination(self._provider_destination(provider), credential, shown)
        self._add_key(target, credential)
        return target

    def destination(self, model: str, target: dict[str, Any]) -> Destination:
        """Where ``target`` (``route``'s, for ``model``) connects; cached per model name."""
        found = self._destinations.get(model)
        if found is None:
            found = self._destination(target)
            if len(self._destinations) >= _CACHE_MAX:
                self._destinations.clear()
            self._destinations[model] = found
        return found

    def _add_key(self, target: dict[str, Any], credential: Credential | None) -> None:
        if "api_key" not in target:
            key = credential.provider_key if credential else None
            key = key or self._settings.api_key
            if key:
                target["api_key"] = key

    def _admit(self, model: str, target: dict[str, Any], credential: Credential, *, configured: bool) -> None:
        if not configured:  # an alias's name is only a key into the operator's table
            reason = egress.unsafe_id(model)
            if reason is not None:
                raise invalid_model_id(model, reason)
        found = self.destination(model, target)
        if found.url is not None:
            self._refuse_self(found.url, model)
        if configured or self._settings.api_base:
            return  # the operator's own routes
        self._admit_destination(found, credential, model)

    def _admit_destination(self, found: Destination, credential: Credential, name: str) -> None:
        if found.provider is not None and found.provider in self._allowed:
            return
        if credential.provider_key is None or found.provider in egress.AMBIENT_CREDENTIALS:
            raise not_configured(name)  # the server's credentials would pay
        if found.url is not None and not found.chosen and egress.is_local_url(found.url):
            raise not_configured(name, local=True)

    def _refuse_self(self, url: str, name: str) -> None:
        if egress.is_own_address(url, self._own):
            raise ApiError(
                400,
                f"The model '{_shown(name)}' routes to this memproxy server itself; a call there would loop.",
                param="model",
                code="model_not_found",
            )

    def _destination(self, target: dict[str, Any]) -> Destination:
        api_base = target.get("api_base")
        try:
            _, provider, _, base = self._litellm.get_llm_provider(
                model=str(target["model"]),
                custom_llm_provider=target.get("custom_llm_provider"),
                api_base=api_base,
            )
        except Exception:  # LiteLLM cannot route it (and will say so on its path)
            provider, base = None, None
        if api_base:
            return Destination(provider and str(provider), str(api_base), True)
        return self._provider_destination(provider and str(provider), base)

    def _provider_destination(self, provider: str | None, base: str | None = None) -> Destination:
        local = egress.local_default(provider)
        if local is not None:
            return Destination(provider, local[0], local[1])
        if base:  # LiteLLM's own default, or the provider's base from the environment
            prefix = str(provider).upper()
            chosen = base in (os.environ.get(f"{prefix}_API_BASE"), os.environ.get(f"{prefix}_BASE_URL"))
            return Destination(provider, str(base), chosen)
        return Destination(provider, None, False)

    def chat_kwargs(self, body: dict[str, Any], credential: Credential | None) -> dict[str, Any]:
        kwargs = self.route(str(body["model"]), credential)
        known = {k: v for k, v in body.items() if k in OPENAI_CHAT_PARAMS}
        extra = {
            k: v for k, v in body.items() if k not in OPENAI_CHAT_PARAMS and k not in ("model", "messages")
        }
        kwargs.update(known)
        kwargs["messages"] = body["messages"]
        if known:
            kwargs["allowed_openai_params"] = sorted(known)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    async def chat(self, body: dict[str, Any], credential: Credential | None) -> Any:
        """``litellm.acompletion``; a stream wrapper when ``body["stream"]`` is true."""
        try:
            return await self._litellm.acompletion(**self.chat_kwargs(body, credential))
        except Exception as exc:
            raise to_api_error(exc) from exc

    async def embeddings(self, body: dict[str, Any], credential: Credential | None) -> dict[str, Any]:
        kwargs = self.route(str(body["model"]), credential)
        kwargs["input"] = body["input"]
        kwargs.update({k: v for k, v in body.items() if k in EMBEDDING_PARAMS})
        try:
            response = await self._litellm.aembedding(**kwargs)
        except Exception as exc:
            raise to_api_error(exc) from exc
        result: dict[str, Any] = response.model_dump(exclude_none=True)
        return result

    async def _get_models(self, path: str, target: dict[str, Any]) -> dict[str, Any]:
        """GET ``path`` under ``endpoint``'s OpenAI-style base; its error as it sent it."""
        base = str(target.get("api_base") or OPENAI_BASE)
        key = target.get("api_key")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(timeout=self._settings.timeout_s) as client:
            try:
                response = await client.get(base.rstrip("/") + path, headers=headers)
            except httpx.HTTPError as exc:
                raise ApiError(502, f"upstream unreachable: {exc}", type="server_error") from exc
        if response.status_code != 200:
            raise upstream_http_error(response)
        try:
            result = response.json()
        except ValueError:
            result = None
        if not isinstance(result, dict):
            raise ApiError(502, "the provider's model answer is not a JSON object", type="server_error",
                           code="upstream_invalid_response")  # fmt: skip
        return result

    async def model(self, model_id: str, credential: Credential | None) -> dict[str, Any]:
        """``GET /models/{id}``: an alias answers itself; any other id is the provider's answer."""
        if model_id in self._aliases:
            return {"id": model_id, "object": "model", "created": 0, "owned_by": "memproxy"}
        reason = egress.unsafe_id(model_id)
        if reason is not None:
            raise invalid_model_id(model_id, reason)
        target = self.endpoint(credential, name=model_id)
        return await self._get_models("/models/" + quote(model_id, safe="/:@"), target)

    async def models(self, credential: Credential | None) -> dict[str, Any]:
        """The provider's model list (when it has an OpenAI-style one this caller may ask) plus our aliases."""
        try:
            target: dict[str, Any] | None = self.endpoint(credential)
        except ApiError:  # the server's key may not go to OpenAI: the aliases are the whole list
            target = None
        found = await self._get_models("/models", target) if target is not None else {}
        data = list(found.get("data", []))
        known = {m.get("id") for m in data}
        data += [
            {"id": name, "object": "model", "created": 0, "owned_by": "memproxy"}
            for name in self._aliases
            if name not in known
        ]
        return {"object": "list", "data": data}


def _shown(name: str) -> str:
    """A client-chosen name in a message: bounded, and printable as it was sent."""
    text = name if len(name) <= 200 else name[:200] + "…"
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


def not_configured(name: str, *, local: bool = False) -> ApiError:
    """The 400 for a route the operator did not configure (``Upstream.route``)."""
    where = (
        "its provider's default address is on this server's machine or network"
        if local
        else "it is not an alias in upstream.models and its provider is not in upstream.allow_providers"
    )
    return ApiError(
        400,
        f"The model '{_shown(name)}' does not exist or is not available on this server: {where}.",
        param="model",
        code="model_not_found",
    )


def invalid_model_id(name: str, reason: str) -> ApiError:
    return ApiError(
        400, f"Invalid model id '{_shown(name)}': {reason}.", param="model", code="invalid_model_id"
    )


def upstream_http_error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):  # {"error": "model not found"}, as Ollama and others answer
        error = {"message": error}
    if not isinstance(error, dict):
        error = {}
    return ApiError(
        response.status_code,
        str(error.get("message") or response.text[:500] or "upstream error"),
        type=error.get("type"),
        param=error.get("param"),
        code=error.get("code"),
    )


def timeout_error() -> ApiError:
    """The provider did not answer within ``upstream.timeout_s`` (both paths)."""
    return ApiError(
        504, "The upstream provider did not answer in time.", type="timeout_error", code="upstream_timeout"
    )


def unreachable_error(detail: str) -> ApiError:
    """The provider could not be reached, or the connection broke (both paths)."""
    return ApiError(
        502, f"Upstream connection failed: {detail}", type="server_error", code="upstream_unavailable"
    )


def to_api_error(exc: Exception) -> ApiError:
    """Map a LiteLLM/provider exception to the status and body the provider sent."""
    if isinstance(exc, ApiError):
        return exc
    name = type(exc).__name__
    if name == "Timeout" or isinstance(exc, TimeoutError):
        return timeout_error()
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else _error_from_response(exc)
    if name in ("APIConnectionError", "InternalServerError") and not isinstance(error, dict):
        return unreachable_error(_plain_message(exc))
    if not isinstance(status, int) or status < 400:
        status = 500 if name != "BadRequestError" else 400
    headers = _passed_headers(exc)
    if isinstance(error, dict) and error.get("message"):
        return ApiError(
            status,
            str(error["message"]),
            type=error.get("type") or error_type_for(status),
            param=error.get("param"),
            code=error.get("code"),
            headers=headers,
        )
    return ApiError(status, _plain_message(exc), code=None, headers=headers)


def _error_from_response(exc: Exception) -> dict[str, Any] | None:
    """LiteLLM leaves ``body`` empty for some statuses; the provider's response still has it."""
    response = getattr(exc, "response", None)
    if not isinstance(response, httpx.Response):
        return None
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError, httpx.ResponseNotRead):
        return None
    return error if isinstance(error, dict) else None


def _passed_headers(exc: Exception) -> dict[str, str]:
    """Rate-limit hints the provider sent, so clients back off as they would against it."""
    headers = getattr(exc, "litellm_response_headers", None) or getattr(
        getattr(exc, "response", None), "headers", None
    )
    if not headers:
        return {}
    return {
        k: v for k, v in headers.items() if k.lower() == "retry-after" or k.lower().startswith("x-ratelimit-")
    }


def _plain_message(exc: Exception) -> str:
    """LiteLLM prefixes messages with its own class names; keep the provider's words."""
    message = str(getattr(exc, "message", None) or exc)
    for marker in ("OpenAIException - ", "Exception - "):
        if marker in message:
            message = message.split(marker, 1)[1]
    return message.strip()
