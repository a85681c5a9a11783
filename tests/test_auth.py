"""Credentials to tenants: the tenant is derived from the token, never chosen by the caller."""

from __future__ import annotations

import pytest

from memproxy.auth import Authenticator, passthrough_tenant
from memproxy.config import AuthSettings
from memproxy.errors import ApiError
from memproxy.scope import parse_request_scope


def test_passthrough_tenant_is_a_hash_of_the_token() -> None:
    auth = Authenticator(AuthSettings())
    first = auth.authenticate("Bearer sk-one")
    assert first.tenant == passthrough_tenant("sk-one")
    assert "sk-one" not in first.tenant
    assert first.provider_key == "sk-one"
    assert auth.authenticate("bearer sk-two").tenant != first.tenant


def test_keys_mode_maps_keys_to_tenants() -> None:
    auth = Authenticator(AuthSettings(mode="keys", keys=[{"key": "k" * 20, "tenant": "acme"}]))  # type: ignore[list-item]
    credential = auth.authenticate("Bearer " + "k" * 20)
    assert credential.tenant == "acme" and credential.provider_key is None
    with pytest.raises(ApiError) as err:
        auth.authenticate("Bearer " + "k" * 19)
    assert err.value.status == 401


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer ", "Bearer"])
def test_missing_or_malformed_authorization_is_401(header: str | None) -> None:
    with pytest.raises(ApiError) as err:
        Authenticator(AuthSettings()).authenticate(header)
    assert err.value.status == 401


def test_scope_headers_cannot_choose_the_tenant() -> None:
    scope = parse_request_scope(
        "tenant-a", {"x-memproxy-user-id": "u", "x-memproxy-tenant": "tenant-b"}, None
    )
    assert scope.scope.tenant == "tenant-a"


def test_user_header_wins_over_body_user_and_memory_off_without_ids() -> None:
    scoped = parse_request_scope("t", {"x-memproxy-user-id": "header-user"}, "body-user")
    assert scoped.scope.user_id == "header-user" and scoped.memory_on
    assert parse_request_scope("t", {}, "body-user").scope.user_id == "body-user"
    assert not parse_request_scope("t", {"x-memproxy-session-id": "s"}, None).memory_on
    assert parse_request_scope("t", {"x-memproxy-agent-id": "bot"}, None).memory_on


def test_scope_key_hashes_parts_unambiguously() -> None:
    a = parse_request_scope("t", {"x-memproxy-user-id": "a", "x-memproxy-agent-id": "b"}, None).scope
    c = parse_request_scope("t", {"x-memproxy-user-id": "ab"}, None).scope
    other_tenant = parse_request_scope(
        "u", {"x-memproxy-user-id": "a", "x-memproxy-agent-id": "b"}, None
    ).scope
    assert len({a.key, c.key, other_tenant.key}) == 3
    assert len(a.key) == 64 and all(ch in "0123456789abcdef" for ch in a.key)
