"""The ``local`` embedder: a sentence-transformers model (``pip install 'memproxy[local]'``, needs torch)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np

from memproxy.index.calibration import measure_floor
from memproxy.index.embedders.base import Vectors, normalize_rows

log = logging.getLogger(__name__)


class LocalEmbedder:
    """``model`` is a model name or a directory. Loaded once, at start (``load``).

    Batches honour ``batch_size``; no progress bar is written. A model that declares
    ``query``/``passage`` prompts (e5, bge configs do) gets them applied.
    """

    def __init__(self, model: str, batch_size: int = 64) -> None:
        self.model_name = model
        self.batch_size = batch_size
        self.identity = f"local:{model}"
        self.dim = 0
        self.floor = 0.0
        self.loaded = False
        self._model: Any = None
        self._lock = asyncio.Lock()

    def _load(self) -> Any:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(self.model_name)
        # Renamed in sentence-transformers 5; the old name warns there.
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        return model

    async def load(self) -> None:
        async with self._lock:
            if self.loaded:
                return
            self._model = await asyncio.to_thread(self._load)
            self.loaded = True
            self.floor = await measure_floor(self)
            log.info("embedding model %s loaded (%d dimensions, evidence floor %.2f)",
                     self.identity, self.dim, self.floor)  # fmt: skip

    async def embed(self, texts: list[str], *, query: bool = False) -> Vectors:
        if not self.loaded:
            await self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        prompts = getattr(self._model, "prompts", None) or {}
        names = ("query",) if query else ("passage", "document")
        prompt_name = next((n for n in names if n in prompts), None)
        raw = await asyncio.to_thread(
            self._model.encode, texts, batch_size=self.batch_size, show_progress_bar=False,
            normalize_embeddings=True, prompt_name=prompt_name,
        )  # fmt: skip
        return normalize_rows(np.asarray(raw))
