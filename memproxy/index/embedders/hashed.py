"""The built-in ``hash`` embedder: offline, deterministic, no model to load."""

from __future__ import annotations

import asyncio
import itertools
import re
import zlib

import numpy as np

from memproxy.index.embedders.base import Vectors, normalize_rows
from memproxy.index.lexical import STOPWORDS

_WORD = re.compile(r"\w+")
# Above this many texts, hashing goes to a thread rather than running on the loop.
_INLINE_MAX_TEXTS = 4
# Unrelated texts still share character n-grams ("ing", "the"); measured with
# ``memproxy.index.calibration`` (bench/retrieval_quality.py prints it).
HASH_FLOOR = 0.15


class HashEmbedder:
    """Offline, deterministic signed feature hashing.

    Features: lowercase word unigrams (weight 1), word bigrams (0.7) and character
    3/4-grams of each word with boundary marks (0.35), so "Berlin" and "berlin's" share
    most of their mass. ``zlib.crc32`` is stable across processes, unlike ``hash()``.
    One bit of the hash picks the sign, which keeps unrelated features from adding up
    to a spurious positive similarity. Queries and memories are embedded alike.
    """

    loaded = True

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.identity = f"hash:{dim}"
        self.floor = HASH_FLOOR

    async def load(self) -> None:
        return None

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

    async def embed(self, texts: list[str], *, query: bool = False) -> Vectors:
        if len(texts) <= _INLINE_MAX_TEXTS:
            return self.embed_sync(texts)  # microseconds; a thread hop would cost more
        return await asyncio.to_thread(self.embed_sync, texts)
