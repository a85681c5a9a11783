"""Counting tokens the way the target model will, offline.

Invariants:
- Only the encodings LiteLLM bundles (``BUNDLED``) are ever loaded: tiktoken would
  otherwise try to download them, and memproxy must work without internet. When
  ``TIKTOKEN_CACHE_DIR`` is unset it is pointed at LiteLLM's bundled tokenizer files
  (as ``litellm`` itself does on import) before the first encoding loads.
- A model tiktoken does not know (or whose encoding is not bundled) is counted with
  ``DEFAULT_ENCODING``; a failed load also falls back to it, never to an error.
- Encodings load once per process-lifetime of a ``Tokenizers`` (in a worker thread,
  they take ~0.1-0.2 s) and are then cached.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

import tiktoken

from memproxy.config import UpstreamSettings

log = logging.getLogger(__name__)

DEFAULT_ENCODING = "cl100k_base"
BUNDLED = frozenset({"cl100k_base", "o200k_base", "p50k_base"})


def bundled_tokenizer_dir() -> Path | None:
    """LiteLLM's directory of tiktoken files, found without importing litellm (slow)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return path if path.is_dir() else None


def use_bundled_tokenizers() -> None:
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    directory = bundled_tokenizer_dir()
    if directory is not None:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)


def encoding_name_for(model: str, upstream: UpstreamSettings | None = None) -> str:
    """The bundled encoding of ``model`` (an alias is resolved to its LiteLLM model)."""
    for alias in upstream.models if upstream else ():
        if alias.name == model:
            model = str(alias.litellm_params.get("model", model))
            break
    candidates = [model, model.rsplit("/", 1)[-1]]  # "openai/gpt-4o" → "gpt-4o"
    for candidate in candidates:
        try:
            name = tiktoken.encoding_name_for_model(candidate)
        except KeyError:
            continue
        return name if name in BUNDLED else DEFAULT_ENCODING
    return DEFAULT_ENCODING


class Tokenizers:
    """Loaded encodings by name; ``get`` loads off the event loop the first time."""

    def __init__(self, upstream: UpstreamSettings | None = None) -> None:
        self.upstream = upstream
        self._encodings: dict[str, Any] = {}
        self._names: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def for_model(self, model: str) -> Any:
        name = self._names.get(model)
        if name is None:  # resolved once per model name (bounded: names are client-chosen)
            if len(self._names) >= 1024:
                self._names.clear()
            name = self._names[model] = encoding_name_for(model, self.upstream)
        return await self.get(name)

    async def get(self, name: str) -> Any:
        encoding = self._encodings.get(name)
        if encoding is not None:
            return encoding
        async with self._locks.setdefault(name, asyncio.Lock()):
            if name not in self._encodings:
                self._encodings[name] = await asyncio.to_thread(self._load, name)
        return self._encodings[name]

    async def warm(self, names: tuple[str, ...] = ("cl100k_base", "o200k_base")) -> None:
        """Load the common encodings early so the first requests do not pay for it."""
        for name in names:
            await self.get(name)

    def _load(self, name: str) -> Any:
        use_bundled_tokenizers()
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # a missing file would mean a download attempt; never fatal
            if name == DEFAULT_ENCODING:
                raise
            log.warning("tokenizer %s unavailable (%s); counting with %s", name, exc, DEFAULT_ENCODING)
            return tiktoken.get_encoding(DEFAULT_ENCODING)


def count_tokens(encoding: Any, text: str) -> int:
    # ``disallowed_special=()``: a memory mentioning "<|endoftext|>" is text, not an error.
    return len(encoding.encode(text, disallowed_special=()))
