"""The ``litellm`` embedder: any provider's embedding model through ``litellm.aembedding``."""

from __future__ import annotations

from typing import Any

import numpy as np

from memproxy.index.embedders.base import Vectors, normalize_rows
from memproxy.upstream.provider import import_litellm

# Provider models are not calibrated at start (that would be a paid call); hosted
# embedding models put unrelated short texts at a cosine of roughly 0.1-0.3.
REMOTE_FLOOR = 0.2


class LiteLLMEmbedder:
    """Batches of ``batch_size`` texts per call; ``dim`` is learnt from the first answer."""

    loaded = True

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
        self.floor = REMOTE_FLOOR

    async def load(self) -> None:
        return None

    async def embed(self, texts: list[str], *, query: bool = False) -> Vectors:
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
