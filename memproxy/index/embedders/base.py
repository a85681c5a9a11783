"""What every embedder is: text → float32 rows of unit L2 norm, in one named space.

Invariants:
- ``identity`` names the embedding space ("hash:256", "onnx:<name>@<digest>",
  "litellm:<model>", "local:<model>"); vectors of different identities are never mixed
  in one index. It is stored on every memory row and in ``meta``, so a change of model
  is detected and the memories are re-embedded.
- ``embed(texts, query=True)`` embeds search queries, ``query=False`` (the default)
  stored memories: retrieval models such as e5/bge want different prefixes for each.
- ``floor`` is the cosine a query/memory pair with nothing in common still reaches in
  this space (measured on unrelated text, see ``memproxy.index.calibration``). Only a
  cosine above it is semantic evidence; scoring rescales cosines above it to [0, 1], so
  ``recall.min_score`` means the same for every embedder.
- ``loaded`` is False until the model is ready (``await load()``); ``embed`` loads on
  first use, but the server loads at start and /readyz waits for it.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    identity: str
    dim: int
    floor: float
    loaded: bool

    async def load(self) -> None: ...

    async def embed(self, texts: list[str], *, query: bool = False) -> Vectors: ...


def normalize_rows(vectors: npt.NDArray[Any]) -> Vectors:
    """L2-normalize rows; an all-zero row (empty text) stays zero."""
    out = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out
