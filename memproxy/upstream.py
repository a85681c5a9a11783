"""The provider side: every call to a model goes through LiteLLM from here.

Invariants:
- Fields LiteLLM knows as OpenAI parameters are passed as keyword arguments (and
  whitelisted with ``allowed_openai_params`` so none is refused or dropped); every other
  body field travels in ``extra_body``, so a client can never set LiteLLM's own options
  (``api_base``, ``api_key``, ``mock_response``, ``metadata`` …) through the request body.
- ``upstream.api_base`` sends every call to that base URL whatever the model name;
  ``upstream.models`` aliases bring their own ``litellm_params`` (and key).
- LiteLLM is imported lazily (it is slow to import), after pinning its cost map to the
  local copy so start-up never needs the network.
"""

from __future__ import annotations

import logging
import os
from typing import Any
from urllib.parse import quote

import httpx

from memproxy.auth import Credential
from memproxy.config import UpstreamSettings
from memproxy.errors import ApiError, error_type_for

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
    def __init__(self, settings: UpstreamSettings) -> None:
        self._settings = settings
        self._aliases = {alias.name: dict(alias.litellm_params) for alias in settings.models}
        self._litellm = import_litellm()

    @property
    def litellm(self) -> Any:
        """The imported ``litellm`` module (its provider table decides the fast path)."""
        return self._litellm

    @property
    def timeout_s(self) -> float:
        return self._settings.timeout_s

    def route(self, model: str, credential: Credential | None) -> dict[str, Any]:
        """Where a model name goes: model, base URL, key and timeout for LiteLLM."""
        target: dict[str, Any] = {"timeout": self._settings.timeout_s, "max_retries": 0}
        alias = self._aliases.get(model)
        if alias is not None:
            target.update(alias)
        else:
            target["model"] = model
        if self._settings.api_base and "api_base" not in target:
            target["api_base"] = self._settings.api_base
            target.setdefault("custom_llm_provider", "openai")
        if "api_key" not in target:
            key = credential.provider_key if credential else None
            key = key or self._settings.api_key
            if key:
                target["api_key"] = key
        return target

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

    async def _get_models(self, path: str, credential: Credential | None) -> dict[str, Any]:
        """GET ``path`` under the provider's OpenAI-style base; its error as it sent it."""
        base = self._settings.api_base or "https://api.openai.com/v1"
        key = (credential.provider_key if credential else None) or self._settings.api_key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(timeout=self._settings.timeout_s) as client:
            try:
                response = await client.get(base.rstrip("/") + path, headers=headers)
            except httpx.HTTPError as exc:
                raise ApiError(502, f"upstream unreachable: {exc}", type="server_error") from exc
        if response.status_code != 200:
            raise upstream_http_error(response)
        result: dict[str, Any] = response.json()
        return result

    async def model(self, model_id: str, credential: Credential | None) -> dict[str, Any]:
        """``GET /models/{id}``: an alias answers itself; any other id is the provider's answer."""
        if model_id in self._aliases:
            return {"id": model_id, "object": "model", "created": 0, "owned_by": "memproxy"}
        return await self._get_models("/models/" + quote(model_id, safe="/:@"), credential)

    async def models(self, credential: Credential | None) -> dict[str, Any]:
        """The provider's model list (when it has an OpenAI-style one) plus our aliases."""
        data = list((await self._get_models("/models", credential)).get("data", []))
        known = {m.get("id") for m in data}
        data += [
            {"id": name, "object": "model", "created": 0, "owned_by": "memproxy"}
            for name in self._aliases
            if name not in known
        ]
        return {"object": "list", "data": data}


def upstream_http_error(response: httpx.Response) -> ApiError:
    try:
        error = response.json().get("error") or {}
    except ValueError:
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
