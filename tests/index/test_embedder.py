"""Embedders: the offline hash embedder's properties, and the factory."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import numpy as np
import pytest

from memproxy.config import EmbeddingSettings, UpstreamSettings
from memproxy.index.embedder import HashEmbedder, LiteLLMEmbedder, LocalEmbedder, make_embedder
from memproxy.testing.scripted_upstream import EMBED_DIM, ScriptedUpstream
from memproxy.testing.scripted_upstream import embed as scripted_embed


def test_hash_vectors_are_unit_float32_rows() -> None:
    vectors = asyncio.run(HashEmbedder(128).embed(["hello world", "Berlin", "", "x" * 500, "a b c d e f"]))
    assert vectors.dtype == np.float32 and vectors.shape == (5, 128)
    norms = np.linalg.norm(vectors, axis=1)
    assert np.allclose(norms[[0, 1, 3, 4]], 1.0, atol=1e-5)
    assert norms[2] == 0.0  # empty text has no features


@pytest.mark.slow  # a subprocess (~1 s)
def test_hash_is_deterministic_across_processes() -> None:
    code = "from memproxy.index.embedder import HashEmbedder; print(HashEmbedder(64).embed_sync(['Stable text'])[0].tolist())"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert outputs.pop().strip() == str(HashEmbedder(64).embed_sync(["Stable text"])[0].tolist())


def test_hash_similarity_follows_shared_words_and_subwords() -> None:
    emb = HashEmbedder(256)
    berlin, possessive, tokyo = emb.embed_sync(["Berlin", "berlin's", "Tokyo"])
    assert float(berlin @ possessive) > 0.5 > float(berlin @ tokyo)
    a, b, c = emb.embed_sync(
        ["I moved to Berlin last year", "the user lives in berlin", "I enjoy playing chess"]
    )
    assert float(a @ b) > float(a @ c)


def test_factory_picks_provider_and_resolves_aliases() -> None:
    assert make_embedder(EmbeddingSettings(provider="hash", dim=32), UpstreamSettings()).identity == "hash:32"
    local = make_embedder(EmbeddingSettings(provider="local", model="/models/minilm", batch_size=9),
                          UpstreamSettings())  # fmt: skip
    assert isinstance(local, LocalEmbedder) and local.identity == "local:/models/minilm"
    assert local.batch_size == 9 and not local.loaded
    litellm_default = make_embedder(EmbeddingSettings(provider="litellm"), UpstreamSettings())
    assert litellm_default.identity == "litellm:text-embedding-3-small"
    upstream = UpstreamSettings.model_validate(
        {
            "api_base": "http://127.0.0.1:9/v1",
            "api_key": "sk-server",
            "models": [{"name": "embed", "litellm_params": {"model": "openai/text-embedding-3-large"}}],
        }
    )
    embedder = make_embedder(EmbeddingSettings(provider="litellm", model="embed", batch_size=7), upstream)
    assert isinstance(embedder, LiteLLMEmbedder)
    assert (
        embedder.model == "openai/text-embedding-3-large"
        and embedder.identity == "litellm:openai/text-embedding-3-large"
    )
    assert embedder.api_base == "http://127.0.0.1:9/v1" and embedder.api_key == "sk-server"
    assert embedder.batch_size == 7 and embedder.dim == 0


def test_litellm_embedder_batches_against_an_openai_compatible_server(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    fake, url = upstream
    embedder = LiteLLMEmbedder("text-embedding-3-small", api_base=url, api_key="sk-test", batch_size=2)
    before = len([r for r in fake.requests if r.path.endswith("/embeddings")])
    vectors = asyncio.run(embedder.embed(["one", "two", "three", "four", "five"]))
    assert vectors.shape == (5, EMBED_DIM) and embedder.dim == EMBED_DIM
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[2], np.asarray(scripted_embed("three"), dtype=np.float32), atol=1e-6)
    calls = [r for r in fake.requests if r.path.endswith("/embeddings")][before:]
    assert len(calls) == 3  # batches of 2, 2 and 1
