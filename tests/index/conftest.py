"""Shared fixtures of the index tests: the built-in model, loaded once per session."""

from __future__ import annotations

import asyncio

import pytest

from memproxy.index.embedder import OnnxEmbedder


@pytest.fixture(scope="session")
def minilm() -> OnnxEmbedder:
    embedder = OnnxEmbedder()
    asyncio.run(embedder.load())
    return embedder
