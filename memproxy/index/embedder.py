"""Pick the embedder the config names (each family lives in ``memproxy.index.embedders``)."""

from __future__ import annotations

from memproxy.config import EmbeddingSettings, UpstreamSettings
from memproxy.index.embedders.base import Embedder, Vectors, normalize_rows
from memproxy.index.embedders.hashed import HashEmbedder
from memproxy.index.embedders.local import LocalEmbedder
from memproxy.index.embedders.onnx import DEFAULT_MODEL, OnnxEmbedder
from memproxy.index.embedders.remote import LiteLLMEmbedder

__all__ = [
    "Embedder", "HashEmbedder", "LiteLLMEmbedder", "LocalEmbedder", "OnnxEmbedder", "Vectors",
    "make_embedder", "normalize_rows",
]  # fmt: skip

DEFAULT_MODELS = {
    "onnx": DEFAULT_MODEL,
    "local": "sentence-transformers/all-MiniLM-L6-v2",
    "litellm": "text-embedding-3-small",
}


def make_embedder(settings: EmbeddingSettings, upstream: UpstreamSettings) -> Embedder:
    model = settings.model or DEFAULT_MODELS.get(settings.provider, "")
    if settings.provider == "hash":
        return HashEmbedder(settings.dim)
    if settings.provider == "onnx":
        return OnnxEmbedder(model, batch_size=settings.batch_size, threads=settings.threads)
    if settings.provider == "local":
        return LocalEmbedder(model, batch_size=settings.batch_size)
    extra: dict[str, object] = {}
    for alias in upstream.models:  # an alias may carry its own provider model/credentials
        if alias.name == model:
            extra = dict(alias.litellm_params)
            model = str(extra.pop("model"))
    api_base = upstream.api_base or extra.pop("api_base", None)
    api_key = extra.pop("api_key", None) or upstream.api_key
    return LiteLLMEmbedder(
        model,
        api_base=str(api_base) if api_base else None,
        api_key=str(api_key) if api_key else None,
        batch_size=settings.batch_size,
        timeout=min(upstream.timeout_s, 120.0),
        extra=extra,
    )
