"""Text → vector. Every embedder returns float32 rows of unit L2 norm.

Invariants:
- ``identity`` names the embedding space ("hash:256", "litellm:<model>", "local:<model>");
  vectors of different identities are never mixed in one index. It is stored on every
  memory row (``embed_model``) and in ``meta``, so a change is detected and re-embedded.
- ``dim`` is known up front for ``hash``/``local``; ``litellm`` discovers it on the first
  call (0 until then).
- Heavy libraries (litellm, sentence-transformers) are imported lazily, never at import time.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import zlib
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from memproxy.config import EmbeddingSettings, UpstreamSettings
from memproxy.index.lexical import STOPWORDS
from memproxy.upstream import import_litellm

Vectors = npt.NDArray[np.float32]

_WORD = re.compile(r"\w+")
# Above this many texts, hashing goes to a thread rather than running on the loop.
_INLINE_MAX_TEXTS = 4


class Embedder(Protocol):
    identity: str
    dim: int

    async def embed(self, texts: list[str]) -> Vectors: ...


def normalize_rows(vectors: npt.NDArray[Any]) -> Vectors:
    """L2-normalize rows; an all-zero row (empty text) stays zero."""
    out = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


class HashEmbedder:
    """Offline, deterministic signed feature hashing.

    Features: lowercase word unigrams (weight 1), word bigrams (0.7) and character
    3/4-grams of each word with boundary marks (0.35), so "Berlin" and "berlin's" share
    most of their mass. ``zlib.crc32`` is stable across processes, unlike ``hash()``.
    One bit of the hash picks the sign, which keeps unrelated features from adding up
    to a spurious positive similarity.
    """

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.identity = f"hash:{dim}"

    def features(self, text: str) -> tuple[list[int], list[float]]:
        words = _WORD.findall(text.lower())
        # Stopwords carry no topic and would make unrelated sentences look alike.
        words = [w for w in words if w not in STOPWORDS] or words
        keys: list[str] = []
        weights: list[float] = []
        for word in words:
            keys.append("w:" + word)
            weights.append(1.0)
            marked = f"<{word}>"
            for n in (3, 4):
                for i in range(len(marked) - n + 1):
                    keys.append("c:" + marked[i : i + n])
                    weights.append(0.35)
        for first, second in itertools.pairwise(words):
            keys.append(f"b:{first} {second}")
            weights.append(0.7)
        return [zlib.crc32(k.encode()) for k in keys], weights

    def embed_sync(self, texts: list[str]) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            hashes, weights = self.features(text)
            if not hashes:
                continue
            h = np.asarray(hashes, dtype=np.uint64)
            signs = np.where((h >> np.uint64(31)) & np.uint64(1), -1.0, 1.0)
            cols = (h % np.uint64(self.dim)).astype(np.intp)
            out[row] = np.bincount(cols, weights=signs * np.asarray(weights), minlength=self.dim)
        return normalize_rows(out)

    async def embed(self, texts: list[str]) -> Vectors:
        if len(texts) <= _INLINE_MAX_TEXTS:
            return self.embed_sync(texts)  # microseconds; a thread hop would cost more
        return await asyncio.to_thread(self.embed_sync, texts)


class LiteLLMEmbedder:
    """Any provider's embedding model through ``litellm.aembedding``, in batches."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.batch_size = batch_size
        self.timeout = timeout
        self.extra = dict(extra or {})
        self.identity = f"litellm:{model}"
        self.dim = 0

    async def embed(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        litellm = import_litellm()
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            kwargs: dict[str, Any] = {"model": self.model, "input": batch, "timeout": self.timeout}
            kwargs.update(self.extra)
            if self.api_base:
                kwargs["api_base"] = self.api_base
                kwargs["custom_llm_provider"] = "openai"
            if self.api_key:
                kwargs["api_key"] = self.api_key
            response = await litellm.aembedding(**kwargs)
            data = sorted(response.data, key=lambda d: _field(d, "index"))
            rows.extend(list(_field(d, "embedding")) for d in data)
        vectors = normalize_rows(np.asarray(rows, dtype=np.float32))
        self.dim = int(vectors.shape[1])
        return vectors


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


class LocalEmbedder:
    """sentence-transformers (``pip install memproxy[local]``); ``model`` may be a directory."""

    def __init__(self, model: str) -> None:
        self.model_name = model
        self.identity = f"local:{model}"
        self._model: Any = None
        self.dim = 0
        self._lock = asyncio.Lock()

    def _load(self) -> Any:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(self.model_name)
        self.dim = int(model.get_sentence_embedding_dimension())
        return model

    async def load(self) -> None:
        async with self._lock:
            if self._model is None:
                self._model = await asyncio.to_thread(self._load)

    async def embed(self, texts: list[str]) -> Vectors:
        await self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        raw = await asyncio.to_thread(self._model.encode, texts, normalize_embeddings=True)
        return normalize_rows(np.asarray(raw))


def make_embedder(settings: EmbeddingSettings, upstream: UpstreamSettings) -> Embedder:
    if settings.provider == "hash":
        return HashEmbedder(settings.dim)
    if settings.provider == "local":
        return LocalEmbedder(settings.model)
    model, extra = settings.model, {}
    for alias in upstream.models:  # an alias may carry its own provider model/credentials
        if alias.name == settings.model:
            extra = dict(alias.litellm_params)
            model = str(extra.pop("model"))
    api_base = upstream.api_base or extra.pop("api_base", None)
    api_key = extra.pop("api_key", None) or upstream.api_key
    return LiteLLMEmbedder(
        model,
        api_base=api_base,
        api_key=api_key,
        batch_size=settings.batch_size,
        timeout=min(upstream.timeout_s, 120.0),
        extra=extra,
    )
