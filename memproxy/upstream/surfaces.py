"""Provider calls for the API surfaces besides chat: OpenAI's Responses API and Anthropic's
Messages API, both through LiteLLM (so either reaches any provider LiteLLM translates to).

Invariants (as ``upstream`` for chat):
- Routing (model aliases, ``upstream.api_base``, which key, the allow-list) is ``Upstream.route``'s
  (``Upstream.endpoint``'s for stored responses, whose LiteLLM ids name a provider).
- Fields of the API LiteLLM knows go as keyword arguments; on the Responses API every other
  field travels in ``extra_body``. Nothing in a request body can set LiteLLM's own options
  (``api_base``, ``api_key``, ``mock_response`` …). LiteLLM's Messages interface has no
  ``extra_body``: fields outside ``ANTHROPIC_PARAMS`` are not forwarded.
- Every failure comes out as ``ApiError`` with the provider's status and message.
"""

from __future__ import annotations

import json
from typing import Any

from memproxy.auth import Credential
from memproxy.errors import ApiError
from memproxy.upstream.egress import unsafe_id
from memproxy.upstream.provider import Upstream, import_litellm, to_api_error

# The request fields of ``litellm.responses`` (OpenAI's Responses API parameters).
RESPONSES_PARAMS = frozenset(
    {
        "input", "include", "instructions", "max_output_tokens", "prompt", "metadata",
        "parallel_tool_calls", "previous_response_id", "reasoning", "store", "background",
        "stream", "temperature", "text", "tool_choice", "tools", "top_p", "truncation",
        "user", "service_tier", "safety_identifier",
    }
)  # fmt: skip
# Anthropic Messages request fields LiteLLM forwards (``messages``/``model`` aside).
ANTHROPIC_PARAMS = frozenset(
    {
        "max_tokens", "metadata", "stop_sequences", "stream", "system", "temperature",
        "thinking", "tool_choice", "tools", "top_k", "top_p", "container",
        "context_management", "output_format", "output_config", "service_tier",
        "inference_geo", "speed", "mcp_servers",
    }
)  # fmt: skip
ANTHROPIC_HEADERS = ("anthropic-beta",)


class SurfaceUpstream:
    """``litellm.aresponses`` / ``aget_responses`` / ``adelete_responses`` / ``anthropic_messages``."""

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._litellm = import_litellm()
        from litellm.responses.utils import ResponsesAPIRequestUtils

        self._decode_id = ResponsesAPIRequestUtils.decode_responses_api_response_id

    async def create_response(self, body: dict[str, Any], credential: Credential | None) -> Any:
        """A ``ResponsesAPIResponse``, or an async iterator of typed events when streaming."""
        kwargs = call_arguments(self._upstream, body, credential, RESPONSES_PARAMS)
        try:
            return await self._litellm.aresponses(**kwargs)
        except Exception as exc:
            raise provider_error(exc) from exc

    async def stored_response(
        self, method: str, response_id: str, credential: Credential | None
    ) -> dict[str, Any]:
        """``GET`` (``aget_responses``) or ``DELETE`` (``adelete_responses``) a stored response."""
        target = self._stored(response_id, credential)
        call = self._litellm.aget_responses if method == "GET" else self._litellm.adelete_responses
        try:
            answer = await call(response_id=response_id, **target)
        except Exception as exc:
            raise provider_error(exc) from exc
        return dump(answer)

    def _stored(self, response_id: str, credential: Credential | None) -> dict[str, Any]:
        """Where a stored response lives: LiteLLM decodes the provider from its own ids (and
        that provider wins over ours), otherwise it is OpenAI's (or ``upstream.api_base``'s).

        A LiteLLM id is client-supplied text: the provider it names passes the allow-list as a
        model's would, and the provider's id inside it must be safe in a URL path."""
        try:
            decoded = dict(self._decode_id(response_id))
        except Exception:  # not one of LiteLLM's: the provider's own id
            decoded = {}
        inner = str(decoded.get("response_id") or response_id)
        reason = unsafe_id(inner) or ("it contains '/'" if "/" in inner else None)
        if reason is not None:
            raise ApiError(
                400, f"Invalid response id: {reason}.", param="response_id", code="invalid_response_id"
            )
        provider = str(decoded.get("custom_llm_provider") or "openai")
        target = self._upstream.endpoint(credential, provider, name=provider)
        target.pop("max_retries", None)
        target.setdefault("custom_llm_provider", "openai")
        return target

    async def create_message(
        self, body: dict[str, Any], credential: Credential | None, headers: dict[str, str]
    ) -> Any:
        """An Anthropic message dict, or an async iterator of SSE bytes when streaming."""
        kwargs = self._upstream.route(str(body["model"]), credential)
        kwargs.update({k: v for k, v in body.items() if k in ANTHROPIC_PARAMS})
        kwargs["messages"] = body["messages"]
        passed = {name: headers[name] for name in ANTHROPIC_HEADERS if name in headers}
        if passed:
            kwargs["extra_headers"] = passed
        try:
            return await self._litellm.anthropic_messages(**kwargs)
        except Exception as exc:
            raise provider_error(exc) from exc


def call_arguments(
    upstream: Upstream, body: dict[str, Any], credential: Credential | None, params: frozenset[str]
) -> dict[str, Any]:
    """A LiteLLM call's arguments for ``body``: the route (``Upstream.route``), the fields LiteLLM
    takes as arguments (``params``), and every other field in ``extra_body``, sent verbatim."""
    kwargs = upstream.route(str(body["model"]), credential)
    kwargs.update({k: v for k, v in body.items() if k in params})
    extra = {k: v for k, v in body.items() if k not in params and k != "model"}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def provider_error(exc: Exception) -> ApiError:
    """``to_api_error``, plus the provider's own words when LiteLLM left its JSON error
    body as the message (its Messages interface does)."""
    error = to_api_error(exc)
    try:
        parsed = json.loads(error.message)
    except ValueError:
        return error
    inner = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(inner, dict) or not isinstance(inner.get("message"), str):
        return error
    return ApiError(
        error.status,
        inner["message"],
        type=inner.get("type") or error.type,
        param=inner.get("param"),
        code=inner.get("code", error.code),
        headers=error.headers,
    )


def dump(obj: Any) -> dict[str, Any]:
    """A LiteLLM response object as plain JSON data (its serializer warnings silenced)."""
    if hasattr(obj, "model_dump"):
        data: dict[str, Any] = obj.model_dump(mode="json", exclude_none=True, warnings=False)
        return data
    return dict(obj)
