"""Can memory's own model calls authenticate? Checked once at start, before any job fails.

The worker's extraction calls and, with ``embedding.provider: litellm``, every embedding run
with the server's credentials only (a caller's token is never stored). Without them the
proxy still answers (passthrough forwards the caller's key), but every extraction job fails
until it is dead and recall fails open — silently, unless this check says so.

Invariants:
- Pure: reads settings and the environment, never the network (a provider may still
  refuse a key that is present; that shows in the job's ``last_error``).
- A model call counts as credentialed when a key reaches it the way the call itself
  would get one: an ``upstream.models`` alias's ``api_key``, ``upstream.api_key``, the
  provider's environment variable (as LiteLLM reports it; set but empty is no key), or —
  for extraction only — a keyless ``upstream.api_base`` (the extractor sends a placeholder
  key there; the embedder does not).
- A gap is reported, never enforced: serving and extraction still start (some providers
  authenticate in ways this cannot see, e.g. cloud instance roles).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from memproxy.config import Settings
from memproxy.upstream.provider import import_litellm

log = logging.getLogger("memproxy.model_access")


@dataclass(frozen=True, slots=True)
class CredentialGap:
    setting: str  # the config key naming the model: extraction.model or embedding.model
    model: str
    missing: tuple[str, ...]  # environment variables LiteLLM looked for

    def message(self) -> str:
        env = " or ".join(self.missing) if self.missing else "the provider's credentials"
        return (
            f"no credentials for {self.setting} '{self.model}': set {env} in the server's environment, "
            f"or upstream.api_key, or an upstream.models alias named '{self.model}' with "
            "litellm_params.api_key (a caller's token is never used for memory's own model calls)"
        )


def _alias_params(settings: Settings, name: str) -> dict[str, Any]:
    for alias in settings.upstream.models:
        if alias.name == name:
            return dict(alias.litellm_params)
    return {"model": name}


def _missing_env(model: str, api_base: str | None, environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """Environment variables the provider of ``model`` needs and lacks; None when it has them."""
    litellm = import_litellm()
    if api_base:
        return None if environ.get("OPENAI_API_KEY", "").strip() else ("OPENAI_API_KEY",)
    try:
        with _empty_variables_unset(environ):
            found = litellm.validate_environment(model=model)
    except Exception:  # an unknown provider: LiteLLM cannot tell, so neither can we
        return None
    if found.get("keys_in_environment"):
        return None
    missing = tuple(str(k) for k in found.get("missing_keys") or ())
    return tuple(k for k in missing if not environ.get(k, "").strip()) or None


@contextlib.contextmanager
def _empty_variables_unset(environ: Mapping[str, str]) -> Iterator[None]:
    """LiteLLM counts a variable that is set but empty (``OPENAI_API_KEY=``, as compose and
    ``-e NAME`` leave it) as a key, though no call can authenticate with it: hide such
    variables from it while it looks (at start-up, for microseconds), then put them back."""
    empty = {name: os.environ[name] for name, value in environ.items()
             if not value.strip() and not os.environ.get(name, "-").strip()}  # fmt: skip
    for name in empty:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(empty)


def _gap(settings: Settings, setting: str, name: str, keyless_base_ok: bool,
         environ: Mapping[str, str]) -> CredentialGap | None:  # fmt: skip
    params = _alias_params(settings, name)
    if params.get("api_key") or settings.upstream.api_key:
        return None
    api_base = settings.upstream.api_base or params.get("api_base")
    if settings.upstream.api_base and keyless_base_ok:
        return None
    missing = _missing_env(str(params["model"]), api_base, environ)
    return None if missing is None else CredentialGap(setting, name, missing)


def memory_credential_gaps(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> list[CredentialGap]:
    """The memory model calls that will have no credentials (empty when all will)."""
    env = os.environ if environ is None else environ
    gaps = [_gap(settings, "extraction.model", settings.extraction.model, True, env)]
    if settings.embedding.provider == "litellm":
        # None is litellm's default model (index.embedder.DEFAULT_MODELS).
        model = settings.embedding.model or "text-embedding-3-small"
        gaps.append(_gap(settings, "embedding.model", model, False, env))
    return [gap for gap in gaps if gap is not None]


def warn_about(gaps: list[CredentialGap]) -> None:
    """One loud line per gap at start, saying what will fail and what to set."""
    for gap in gaps:
        effect = ("every extraction job will fail until it is dead" if gap.setting == "extraction.model"
                  else "recall fails open and memory writes fail")  # fmt: skip
        log.warning("MEMORY DEGRADED: %s; %s. /readyz shows it under 'memory'.", gap.message(), effect)
