"""Typed settings: YAML file, then ``MEMPROXY_<SECTION>__<KEY>`` env overrides.

Invariants:
- Unknown keys and wrong types fail at start with a message naming the key
  (``ConfigError``), never silently ignored.
- Unsafe combinations are refused (``keys`` mode without keys, short or repeated keys).
- Nothing here touches the network or the data dir; ``load_settings`` is pure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ENV_PREFIX = "MEMPROXY_"


class ConfigError(Exception):
    """The configuration cannot be used; the message names the offending key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    # Request line plus headers; larger requests get 431 (see ``api.serving``).
    max_header_bytes: int = Field(default=32 * 1024, ge=1024)
    # A request's line and headers must arrive within this; else the connection is closed
    # (slowloris). nginx's client_header_timeout is 60 s; Apache's mod_reqtimeout 20-40 s.
    header_timeout_s: float = Field(default=30.0, gt=0)
    # Open connections per process; one more gets a 503 and is closed (each holds a descriptor,
    # and a proxied request a second one upstream: keep ``ulimit -n`` above twice this).
    max_connections: int = Field(default=1000, ge=1)
    log_format: Literal["plain", "json"] = "plain"
    log_content: bool = False
    # How long SIGTERM waits for in-flight streams before closing them.
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    # Processes serving the port (``memproxy serve --workers N`` overrides); they share the data dir.
    workers: int = Field(default=1, ge=1, le=64)


class StorageSettings(_Section):
    # SQLite database and index snapshots; with ``url`` set, only this replica's snapshots.
    data_dir: Path = Path("./memproxy-data")
    # ``postgresql://user:pass@host:5432/db``: Postgres is the shared source of truth.
    url: str | None = None
    # Postgres connections (and database threads) per process.
    pool_size: int = Field(default=8, ge=1, le=256)

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, url: str | None) -> str | None:
        if url is None or url == "":
            return None
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as exc:
            raise ValueError(f"not a valid URL ({exc})") from None
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError("must be a postgresql:// URL, e.g. postgresql://user:pass@host:5432/memproxy")
        if not parts.hostname and "host=" not in parts.query:
            raise ValueError("must name a host, e.g. postgresql://user:pass@host:5432/memproxy")
        return url


class ModelAlias(_Section):
    model_config = ConfigDict(extra="allow")

    name: str
    litellm_params: dict[str, Any]

    @model_validator(mode="after")
    def _needs_model(self) -> ModelAlias:
        if "model" not in self.litellm_params:
            raise ValueError(f"upstream.models[{self.name}].litellm_params needs a 'model'")
        return self


class UpstreamSettings(_Section):
    api_base: str | None = None
    # Provider key used in ``keys`` mode (passthrough forwards the caller's token).
    api_key: str | None = None
    models: list[ModelAlias] = Field(default_factory=list)
    # LiteLLM providers (``openai``, ``anthropic``, ``groq`` …) whose models any caller may name
    # when the server's own credentials pay (``keys`` mode), as LiteLLM's ``provider/*`` entries.
    # Without ``api_base``, only these and the ``models`` aliases are reachable (memproxy.upstream.provider).
    # ``openai`` by default: a bare "gpt-4o-mini" keeps working with the server's OpenAI key,
    # and that key goes to OpenAI only; ``[]`` allows the aliases alone.
    allow_providers: list[str] = Field(default_factory=lambda: ["openai"])
    timeout_s: float = Field(default=600.0, gt=0)
    # ``auto``: OpenAI-wire providers are relayed byte for byte (memproxy.upstream.fastpath); ``off``:
    # every request goes through LiteLLM's translation.
    fast_path: Literal["auto", "off"] = "auto"


class ApiKey(_Section):
    key: str = Field(min_length=16)
    tenant: str = Field(min_length=1, max_length=256)


class AuthSettings(_Section):
    mode: Literal["passthrough", "keys"] = "passthrough"
    keys: list[ApiKey] = Field(default_factory=list)

    @model_validator(mode="after")
    def _keys_are_usable(self) -> AuthSettings:
        if self.mode == "keys" and not self.keys:
            raise ValueError("auth.keys must list at least one {key, tenant} when auth.mode is 'keys'")
        seen = set()
        for entry in self.keys:
            if entry.key in seen:
                raise ValueError("auth.keys contains the same key twice")
            seen.add(entry.key)
        return self


class EmbeddingSettings(_Section):
    provider: Literal["hash", "onnx", "litellm", "local"] = "onnx"
    # None: the provider's default (onnx: the built-in all-MiniLM-L6-v2; litellm:
    # text-embedding-3-small; local: sentence-transformers/all-MiniLM-L6-v2).
    model: str | None = None
    # Dimension of the built-in ``hash`` embedder (others report their own).
    dim: int = Field(default=256, ge=8, le=8192)
    batch_size: int = Field(default=64, ge=1)
    # Threads an ``onnx`` call embedding several texts (ingest) may use. A single text
    # (a query) always runs on one thread: requests run in parallel anyway, and a second
    # thread costs a query 50% more CPU for no shorter wall time on 2 cores.
    threads: int = Field(default=2, ge=1, le=64)


class IndexSettings(_Section):
    # A scope with more vectors than this is served by HNSW instead of exact search.
    hnsw_threshold: int = Field(default=200_000, ge=1)
    # Upper bound on vectors held in memory across loaded scopes (LRU unload beyond it).
    max_loaded_vectors: int = Field(default=2_000_000, ge=1)
    snapshot_interval_s: float = Field(default=30.0, gt=0)


class RecallSettings(_Section):
    top_k: int = Field(default=8, ge=1, le=100)
    max_tokens: int = Field(default=400, ge=0)
    # Chosen on bench/retrieval_quality.py: scores are measured from the embedder's noise
    # floor, so 0.1 keeps weak but real matches and drops the barely related.
    min_score: float = Field(default=0.1, ge=0.0, le=1.0)
    timeout_ms: int = Field(default=500, ge=1)
    cache_ttl_s: float = Field(default=60.0, ge=0)
    # Where the memory block goes (``proxy.placement``). "end" keeps the caller's whole prompt a
    # stable prefix for provider prompt caches; bench/prefix_cache.py measured it against
    # "after_system" (README "Prompt caching"), hence the default.
    placement: Literal["after_system", "end"] = "end"
    # Each line's last-written day, ``- [2026-11-30] …``: ~8 tokens a line on every request.
    # Off by default: extraction already writes a fact's own dates into its text (relative
    # dates resolved against the turn's date), and a shorter block is a cheaper one.
    dates: bool = False


class MemorySettings(_Section):
    # Cap on every stored memory's text (all write paths): one fact per memory, well
    # below the recall budget (recall.max_tokens is ~4 characters per token).
    max_chars: int = Field(default=300, ge=20, le=16_000)
    # Embedding cosine at or above which an extracted memory is a near-duplicate of an
    # existing one and is not added (token overlap is checked too, whatever the embedder).
    near_duplicate_cosine: float = Field(default=0.95, gt=0, le=1)


class ExtractionSettings(_Section):
    model: str = "gpt-4o-mini"
    instructions: str = ""
    worker_enabled: bool = True
    concurrency: int = Field(default=1, ge=1, le=64)
    max_attempts: int = Field(default=5, ge=1)
    lease_s: float = Field(default=120.0, gt=0)
    backoff_base_s: float = Field(default=2.0, ge=0)
    backoff_max_s: float = Field(default=300.0, ge=0)
    poll_interval_s: float = Field(default=0.5, gt=0)
    # Pending jobs of one scope folded into one extraction call.
    max_jobs_per_call: int = Field(default=8, ge=1)
    context_messages: int = Field(default=10, ge=0)
    similar_memories: int = Field(default=10, ge=0)
    timeout_s: float = Field(default=120.0, gt=0)
    # Bound on every extraction answer: a repetition loop ends here, reported as cut off.
    max_tokens: int = Field(default=1024, ge=16)
    # A retry samples at this temperature (null: never send one, for models that refuse it).
    retry_temperature: float | None = Field(default=0.7, ge=0, le=2)
    # auto: json_schema where LiteLLM says the model supports it, else json_object.
    response_format: Literal["auto", "json_schema", "json_object", "none"] = "auto"


class McpSettings(_Section):
    # Origins a browser page may call /mcp from (the MCP specification's DNS-rebinding check):
    # exact ``scheme://host[:port]`` values. A request without ``Origin`` (a host process, not a
    # page) and one from a loopback origin (``http://localhost:*``, ``127.0.0.1``, ``[::1]``)
    # are always accepted; any other origin gets 403.
    allowed_origins: list[str] = Field(default_factory=list)


class Settings(_Section):
    server: ServerSettings = Field(default_factory=ServerSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    recall: RecallSettings = Field(default_factory=RecallSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    mcp: McpSettings = Field(default_factory=McpSettings)


def _apply_env(data: dict[str, Any], environ: dict[str, str]) -> None:
    """Overlay ``MEMPROXY_SECTION__KEY=value``; values are parsed as YAML (scalars, lists, maps)."""
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{name}: {'.'.join(path[:-1])} is not a section")
            node = child
        node[path[-1]] = value


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{key}: {err['msg']}")
    return "invalid config: " + "; ".join(parts)


def find_config_path(explicit: str | None, environ: dict[str, str]) -> Path | None:
    """``--config``, else ``$MEMPROXY_CONFIG``, else ``./config.yaml`` if present."""
    if explicit:
        return Path(explicit)
    if environ.get("MEMPROXY_CONFIG"):
        return Path(environ["MEMPROXY_CONFIG"])
    local = Path("config.yaml")
    return local if local.exists() else None


def load_settings(path: Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if environ is None else environ)
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must be a mapping of sections")
        data = loaded
    _apply_env(data, env)
    return settings_from_dict(data)


def settings_from_dict(data: dict[str, Any]) -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc
