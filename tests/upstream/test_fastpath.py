"""Which routes take the fast path, and with which URL, model name and key."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from memproxy.api.surfaces.responses import litellm_id, serves_responses
from memproxy.auth import Credential
from memproxy.config import ConfigError, ServerSettings, UpstreamSettings
from memproxy.errors import ApiError
from memproxy.upstream.fastpath import FastPaths, FastRoute
from memproxy.upstream.provider import Upstream
from memproxy.wire.sse import event_start

CALLER = Credential(tenant="t", provider_key="sk-caller")
SERVER_SIDE = Credential(tenant="t", provider_key=None)  # keys mode


def paths(mode: str = "auto", **upstream: Any) -> FastPaths:
    return FastPaths(Upstream(UpstreamSettings.model_validate(upstream)), mode)


@pytest.fixture(autouse=True)
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "GROQ_API_KEY", "ANTHROPIC_API_KEY",
                 "LLAMAFILE_API_BASE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


def test_api_base_sends_every_model_to_it_with_the_callers_key() -> None:
    route = paths(api_base="http://127.0.0.1:9/v1/").route("claude-3-5-sonnet", CALLER)
    assert route == FastRoute("openai", "http://127.0.0.1:9/v1", "claude-3-5-sonnet", "sk-caller", 600.0)


def test_alias_brings_its_model_and_key() -> None:
    alias = {"name": "smart", "litellm_params": {"model": "openai/aliased", "api_key": "sk-alias"}}
    route = paths(api_base="http://h/v1", models=[alias], timeout_s=5).route("smart", CALLER)
    assert route == FastRoute("openai", "http://h/v1", "aliased", "sk-alias", 5.0)


def test_provider_prefixes_resolve_to_their_openai_compatible_base() -> None:
    fast = paths()
    assert fast.route("gpt-4o-mini", CALLER) == FastRoute(
        "openai", "https://api.openai.com/v1", "gpt-4o-mini", "sk-caller", 600.0
    )
    groq = fast.route("groq/llama3-8b", CALLER)
    assert (
        groq is not None and groq.base_url == "https://api.groq.com/openai/v1" and groq.model == "llama3-8b"
    )


@pytest.mark.parametrize(
    "model", ["azure/gpt-4o", "anthropic/claude-3-5-sonnet", "gemini/gemini-pro",
              "bedrock/anthropic.claude-v2", "no-provider-known"],
)  # fmt: skip
def test_other_providers_keep_litellms_translation(model: str) -> None:
    assert paths().route(model, CALLER) is None


def test_alias_with_options_the_relay_does_not_honour_goes_through_litellm() -> None:
    alias = {"name": "v", "litellm_params": {"model": "openai/x", "extra_headers": {"X-A": "1"}}}
    assert paths(api_base="http://h/v1", models=[alias]).route("v", CALLER) is None


def test_keys_mode_uses_the_server_key_then_the_providers_env(monkeypatch: pytest.MonkeyPatch) -> None:
    route = paths(api_base="http://h/v1", api_key="sk-server").route("m", SERVER_SIDE)
    assert route is not None and route.api_key == "sk-server"
    monkeypatch.setenv("GROQ_API_KEY", "sk-groq-env")
    groq = paths(allow_providers=["groq"]).route("groq/llama3-8b", SERVER_SIDE)
    assert groq is not None and groq.api_key == "sk-groq-env"


def test_the_servers_credentials_reach_only_configured_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROQ_API_KEY", "sk-groq-env")
    fast = paths(api_key="sk-server", allow_providers=["openai"])
    assert fast.route("gpt-4o-mini", SERVER_SIDE) is not None
    for model in ("groq/llama3-8b", "llamafile/x", "ollama_chat/x", "openrouter/x", "no-provider-known"):
        with pytest.raises(ApiError) as refused:
            fast.route(model, SERVER_SIDE)
        assert (refused.value.status, refused.value.code) == (400, "model_not_found")


def test_by_default_the_servers_key_reaches_openai_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = paths(api_key="sk-server")
    route = fast.route("gpt-4o-mini", SERVER_SIDE)
    assert route is not None and route.api_key == "sk-server" and "api.openai.com" in route.base_url
    for model in ("groq/llama3-8b", "llamafile/x", "hosted_vllm/x", "openrouter/x"):
        with pytest.raises(ApiError, match="not available"):
            fast.route(model, SERVER_SIDE)
    with pytest.raises(ApiError, match="not available"):
        paths(api_key="sk-server", allow_providers=[]).route("gpt-4o-mini", SERVER_SIDE)


def test_a_cached_route_is_still_checked_with_each_callers_credential() -> None:
    fast = paths(api_key="sk-server")
    assert fast.route("groq/llama3-8b", CALLER) is not None  # resolved and cached for a passthrough caller
    with pytest.raises(ApiError, match="not available"):
        fast.route("groq/llama3-8b", SERVER_SIDE)
    with pytest.raises(ApiError, match="not available"):
        fast.messages_route("groq/llama3-8b", SERVER_SIDE)


def test_a_callers_own_key_may_not_reach_local_defaults_the_operator_did_not_configure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for model in ("llamafile/x", "lemonade/x", "docker_model_runner/x"):
        with pytest.raises(ApiError, match="machine or network"):
            paths().route(model, CALLER)
    assert paths(allow_providers=["llamafile"]).route("llamafile/x", CALLER) is not None
    monkeypatch.setenv("LLAMAFILE_API_BASE", "http://127.0.0.1:9/v1")  # the operator's own choice
    chosen = paths().route("llamafile/x", CALLER)
    assert chosen is not None and chosen.base_url == "http://127.0.0.1:9/v1"


def test_memproxys_own_address_is_refused_even_when_configured() -> None:
    own = ServerSettings(host="127.0.0.1", port=8080)
    fast = FastPaths(Upstream(UpstreamSettings(allow_providers=["llamafile"]), own), "auto")
    with pytest.raises(ApiError, match="itself"):
        fast.route("llamafile/llamafile/x", SERVER_SIDE)
    looped = FastPaths(Upstream(UpstreamSettings(api_base="http://localhost:8080/v1"), own), "auto")
    with pytest.raises(ApiError, match="itself"):
        looped.route("m", CALLER)


def test_unknown_allow_providers_stop_the_start() -> None:
    with pytest.raises(ConfigError, match="opneai"):
        Upstream(UpstreamSettings(allow_providers=["opneai"]))


def test_off_means_never() -> None:
    assert paths("off", api_base="http://h/v1").route("gpt-4o-mini", CALLER) is None


def test_stored_responses_live_at_the_default_route() -> None:
    assert paths(api_base="http://127.0.0.1:9/v1/").stored_route(CALLER) == FastRoute(
        "openai", "http://127.0.0.1:9/v1", "", "sk-caller", 600.0
    )
    assert paths(allow_providers=["openai"]).stored_route(SERVER_SIDE) == FastRoute(
        "openai", "https://api.openai.com/v1", "", None, 600.0
    )
    with pytest.raises(ApiError, match="not available"):
        paths(allow_providers=[]).stored_route(SERVER_SIDE)
    assert paths("off").stored_route(CALLER) is None


def test_only_providers_with_their_own_responses_api_relay_it() -> None:
    assert serves_responses(paths(api_base="http://127.0.0.1:9/v1").route("gpt-4o", CALLER))
    assert not serves_responses(paths().route("groq/llama-3.1-8b-instant", CALLER))  # LiteLLM translates
    assert not serves_responses(None)


def test_litellm_response_ids_are_told_from_the_providers() -> None:
    encoded = "resp_" + base64.b64encode(b"litellm:custom_llm_provider:openai;response_id:resp_1").decode()
    assert litellm_id(encoded)
    assert not litellm_id("resp_2e5274fce85445dd")
    assert not litellm_id("resp_%%%not base64")


def test_the_final_event_is_cut_at_its_own_start() -> None:
    events = b'event: response.output_text.done\ndata: {}\n\nevent: response.completed\ndata: {"a": 1}\n\n'
    offset = events.index(b'data: {"a"')
    assert events[event_start(events, offset) :].startswith(b"event: response.completed")
    assert event_start(b"data: [DONE]\n\n", 0) == 0
    crlf = b"data: {}\r\n\r\nevent: x\r\ndata: 1\r\n\r\n"
    assert crlf[event_start(crlf, crlf.index(b"data: 1")) :] == b"event: x\r\ndata: 1\r\n\r\n"


def test_anthropic_models_are_fast_for_messages_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_BASE", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    fast = paths(allow_providers=["anthropic", "openai"])
    assert fast.route("anthropic/claude-sonnet-4-5", CALLER) is None  # chat needs LiteLLM's translation
    assert fast.messages_route("anthropic/claude-sonnet-4-5", SERVER_SIDE) == FastRoute(
        "anthropic", "https://api.anthropic.com", "claude-sonnet-4-5", "sk-ant-env", 600.0
    )
    assert fast.messages_route("anthropic/claude-sonnet-4-5", CALLER).api_key == "sk-caller"  # type: ignore[union-attr]
    assert fast.messages_route("gpt-4o", CALLER) is None  # translated by LiteLLM
    # LiteLLM takes the endpoint's full URL as an Anthropic base; the relay adds the path itself.
    alias = {
        "name": "c",
        "litellm_params": {"model": "anthropic/claude-x", "api_base": "http://h:1/v1/messages"},
    }
    assert paths(models=[alias]).messages_route("c", CALLER).base_url == "http://h:1"  # type: ignore[union-attr]
    assert paths("off").messages_route("anthropic/claude-sonnet-4-5", CALLER) is None
