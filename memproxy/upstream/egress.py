"""Where a model call may go: the facts the allow-list in ``upstream`` decides with.

A client names a model; LiteLLM turns a provider prefix into a destination. Some providers'
default destinations are on the server's own machine or network (``ollama/`` is
``localhost:11434``, ``llamafile/`` is ``127.0.0.1:8080``, memproxy's own default port), and
a few authenticate with the machine's own cloud credentials whatever key is sent. This
module knows those facts and nothing else; ``upstream.Upstream.route`` applies them.

Invariants:
- Pure: no network, no DNS. A host is local when it is written as a loopback, private,
  link-local or unspecified address, or as ``localhost`` (and ``*.localhost``); a public
  name the operator's DNS resolves to a private address is the operator's configuration.
- ``LOCAL_DEFAULTS`` lists every provider whose LiteLLM default destination is local, with
  the environment variables that override it (tests/security checks the table against
  LiteLLM's source, so an upgrade that adds one fails a test instead of opening a hole).
- ``unsafe_id`` refuses what could change a URL's path once a name is pasted into it:
  ``.``/``..`` segments, ``%`` (percent-encoded separators, double encoding), ``\\``,
  ``?``, ``#``, whitespace and control characters.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

# Provider → (its LiteLLM default base URL, environment variables that replace it).
LOCAL_DEFAULTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ollama": ("http://localhost:11434", ("OLLAMA_API_BASE",)),
    "ollama_chat": ("http://localhost:11434", ("OLLAMA_API_BASE",)),
    "llamafile": ("http://127.0.0.1:8080/v1", ("LLAMAFILE_API_BASE",)),
    "lemonade": ("http://localhost:8000/api/v1", ("LEMONADE_API_BASE",)),
    "xinference": ("http://127.0.0.1:9997/v1", ("XINFERENCE_API_BASE",)),
    "langgraph": ("http://localhost:2024", ("LANGGRAPH_API_BASE",)),
    "langflow": ("http://localhost:7860", ("LANGFLOW_API_BASE",)),
    "docker_model_runner": ("http://localhost:22088/engines/llama.cpp", ("DOCKER_MODEL_RUNNER_API_BASE",)),
    "ragflow": ("http://localhost:9380", ("RAGFLOW_API_BASE",)),
    # These need a base; their documented examples are local, which is where a default would go.
    "a2a": ("http://0.0.0.0:9999", ()),
    "mongodb": ("http://127.0.0.1:8080", ()),
    # Not a destination but this machine itself: the model is loaded and run in-process.
    "vllm": ("http://0.0.0.0:8000", ()),
    "petals": ("http://0.0.0.0", ()),
}  # fmt: skip
# Providers that sign requests with the machine's own credentials (cloud instance roles,
# application-default credentials, token files), whatever key the caller sends (Bedrock is not
# one: LiteLLM sends a caller's key as its bearer token): a call to
# one spends the operator's account even in passthrough mode.
AMBIENT_CREDENTIALS = frozenset(
    {"sagemaker", "sagemaker_chat", "vertex_ai", "vertex_ai_beta", "github_copilot", "chatgpt"}
)
_FORBIDDEN_IN_IDS = frozenset("%\\?#")


def is_local_host(host: str | None) -> bool:
    """Any address that is not a public one, as written (no DNS lookup)."""
    if not host:
        return False
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    # Not "global" covers loopback, private, link-local (169.254.169.254, the cloud metadata
    # service), unspecified, shared (100.64/10, also used for metadata) and reserved ranges.
    return not address.is_global


def is_local_url(url: str) -> bool:
    try:
        return is_local_host(urlsplit(url).hostname)
    except ValueError:
        return False


def url_address(url: str) -> tuple[str, int] | None:
    """``(host, port)`` a URL connects to (the scheme's port when it names none)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


def is_own_address(url: str, own: tuple[str, int] | None) -> bool:
    """Does ``url`` point at memproxy's own listening address (``own``: host and port)?

    A local destination on memproxy's port is memproxy, whichever loopback name it uses; so is
    its own host written as memproxy was told to bind it."""
    if own is None:
        return False
    found = url_address(url)
    if found is None or found[1] != own[1]:
        return False
    host, own_host = found[0], own[0].lower().strip("[]")
    return host == own_host or (is_local_host(host) and (is_local_host(own_host) or own_host == ""))


def local_default(provider: str | None) -> tuple[str, bool] | None:
    """For a provider whose LiteLLM default is local: where it goes, and whether the
    operator's environment chose that (an ``*_API_BASE`` variable); None for any other."""
    if provider not in LOCAL_DEFAULTS:
        return None
    default, env_vars = LOCAL_DEFAULTS[provider]
    chosen = next((os.environ[name] for name in env_vars if os.environ.get(name)), None)
    return (chosen, True) if chosen else (default, False)


def unsafe_id(value: str) -> str | None:
    """Why ``value`` cannot be part of a provider URL's path, or None when it can."""
    if not value:
        return "it is empty"
    if any(ch in _FORBIDDEN_IN_IDS or ch.isspace() or not ch.isprintable() for ch in value):
        return "it contains '%', '\\', '?', '#', whitespace or a control character"
    if any(segment in (".", "..") for segment in value.split("/")):
        return "it contains a '.' or '..' path segment"
    return None
