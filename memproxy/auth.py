"""Credentials to tenants.

Invariants:
- The tenant is derived from the bearer token only: in ``passthrough`` mode a hash of the
  token, in ``keys`` mode the tenant configured for that key. No header or body field
  can choose or change it.
- In ``keys`` mode the comparison is constant-time and every configured key is checked,
  so timing does not reveal which prefix matched.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from memproxy.config import AuthSettings
from memproxy.errors import ApiError


@dataclass(frozen=True, slots=True)
class Credential:
    tenant: str
    # The key forwarded to the provider; ``None`` means "use the server's own".
    provider_key: str | None

    @property
    def tenant_hash(self) -> str:
        """Short, non-reversible tenant label for logs and metrics."""
        return hashlib.sha256(self.tenant.encode()).hexdigest()[:12]


def passthrough_tenant(token: str) -> str:
    return "pt_" + hashlib.sha256(token.encode()).hexdigest()[:40]


class Authenticator:
    def __init__(self, settings: AuthSettings) -> None:
        self._mode = settings.mode
        self._keys = [(entry.key.encode(), entry.tenant) for entry in settings.keys]

    def authenticate(self, authorization: str | None) -> Credential:
        token = _bearer_token(authorization)
        if self._mode == "passthrough":
            return Credential(tenant=passthrough_tenant(token), provider_key=token)
        tenant = None
        for key, key_tenant in self._keys:
            if hmac.compare_digest(key, token.encode()):
                tenant = key_tenant
        if tenant is None:
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
        return Credential(tenant=tenant, provider_key=None)


def _bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise ApiError(
            401,
            "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
            code="missing_api_key",
        )
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "Authorization must be 'Bearer <key>'.", code="invalid_api_key")
    return token
