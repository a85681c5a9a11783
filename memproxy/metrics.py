"""Prometheus metrics of one running app (served by ``GET /metrics`` in ``api.ops``).

Invariants:
- Every metric lives in the app's own ``CollectorRegistry`` (made in ``create_app``), never
  in prometheus-client's process-wide default registry, so several apps in one process
  (the tests do this) neither collide nor mix their numbers.
- Label values come from small fixed sets (route templates, status codes, ``true``/``false``,
  job statuses); no request-controlled string becomes a label, so cardinality is bounded.
- Gauges that mirror state held elsewhere (jobs by status, loaded index scopes, held
  vectors) are refreshed at scrape time from their source, so they cannot drift.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

JOB_STATUSES = ("pending", "running", "done", "dead")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_RECALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_COUNT_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64)
# Recall's stages take from ~10 µs (placement) to tens of ms (a query embedding on a busy machine).
_STAGE_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
# What one turn's recall (on any API surface) spends its time on (``proxy.recall``): the query embedding
# (cache lookup, waiting for and running the embedder), the search in the scope (index, change
# seq, rows from the row cache or the database), fitting the block to the token budget (the
# model's tokenizer) and placing it in the forwarded body.
RECALL_STAGES = ("embed", "search", "budget", "placement")


class Metrics:
    """The app's instruments; other modules call the small methods, never the raw metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "memproxy_requests",
            "HTTP requests by route template, status code and whether the answer was streamed",
            ["route", "method", "status", "streamed"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "memproxy_request_duration_seconds",
            "Whole-request latency, until the last byte was sent",
            ["route", "streamed"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.recall_seconds = Histogram(
            "memproxy_recall_duration_seconds",
            "Time spent recalling memories for one turn (any API surface)",
            buckets=_RECALL_BUCKETS,
            registry=r,
        )
        self.recall_stage_seconds = Histogram(
            "memproxy_recall_stage_duration_seconds",
            "Time one turn's recall spent in each stage: embed (the query embedding, "
            "cache lookup and queueing included), search (index, change seq and rows), budget "
            "(fitting the block with the model's tokenizer), placement (into the forwarded body)",
            ["stage"],
            buckets=_STAGE_BUCKETS,
            registry=r,
        )
        self.query_embeddings = Counter(
            "memproxy_query_embeddings",
            "Recall query embeddings: hit (answered by the query-embedding cache) or miss (embedded)",
            ["result"],
            registry=r,
        )
        self.query_batch_size = Histogram(
            "memproxy_query_embedding_batch_size",
            "Queries embedded together in one embedder call (concurrent queries are micro-batched)",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        for stage in RECALL_STAGES:  # every stage listed from the first scrape, at zero
            self.recall_stage_seconds.labels(stage)
        for result in ("hit", "miss"):
            self.query_embeddings.labels(result)
        self.upstream_seconds = Histogram(
            "memproxy_upstream_duration_seconds",
            "Upstream call of a turn (any API surface): the whole answer, or until the stream opened when streaming; "
            "path: fast (relayed byte for byte) or litellm (LiteLLM's translation)",
            ["streamed", "path"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.recalled = Histogram(
            "memproxy_recalled_memories",
            "Memories injected into one turn (any API surface)",
            buckets=_COUNT_BUCKETS,
            registry=r,
        )
        self.capture_failures = Counter(
            "memproxy_capture_failures",
            "Turns that should have been captured but could not be queued",
            registry=r,
        )
        self.capture_spooled = Counter(
            "memproxy_capture_spooled",
            "Turns spooled to local disk because the database was unreachable",
            registry=r,
        )
        self.spool_pending = Gauge(
            "memproxy_spool_pending", "Spooled turns not yet moved into the outbox", registry=r
        )
        self.recall_failures = Counter(
            "memproxy_recall_failures",
            "Turns whose recall failed open (embedding/search error or timeout)",
            registry=r,
        )
        self.jobs = Gauge("memproxy_jobs", "Outbox jobs by status", ["status"], registry=r)
        self.extraction_attempts = Counter(
            "memproxy_extraction_attempts", "Extraction calls by outcome", ["outcome"], registry=r
        )
        self.extraction_tokens = Counter(
            "memproxy_extraction_tokens", "Tokens spent on extraction calls", ["kind"], registry=r
        )
        self.memory_refusals = Counter(
            "memproxy_memory_refusals",
            "Memory writes refused by a guard (secret, too long, duplicate, ...) by source",
            ["source", "reason"],
            registry=r,
        )
        self.extraction_empty = Counter(
            "memproxy_extraction_empty_answers",
            "Extraction answers with no operation for turns that plainly state facts",
            registry=r,
        )
        self.index_scopes = Gauge(
            "memproxy_index_scopes_loaded", "Scopes whose vector index is in memory", registry=r
        )
        self.index_vectors = Gauge(
            "memproxy_index_vectors_held", "Memory vectors held in loaded indexes", registry=r
        )

    # -- called from the request path -----------------------------------------------------
    def observe_request(self, route: str, method: str, status: int, streamed: bool, seconds: float) -> None:
        flag = "true" if streamed else "false"
        self.requests.labels(route, method, str(status), flag).inc()
        self.request_seconds.labels(route, flag).observe(seconds)

    def observe_recalled(self, count: int) -> None:
        self.recalled.observe(count)

    def observe_recall_stage(self, stage: str, seconds: float) -> None:
        """``stage`` is one of ``RECALL_STAGES``."""
        self.recall_stage_seconds.labels(stage).observe(seconds)

    def query_embedding(self, hit: bool) -> None:
        self.query_embeddings.labels("hit" if hit else "miss").inc()

    def observe_query_batch(self, size: int) -> None:
        self.query_batch_size.observe(size)

    @contextmanager
    def time_recall(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.recall_seconds.observe(time.perf_counter() - started)

    @contextmanager
    def time_upstream(self, streamed: bool, path: str = "litellm") -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.upstream_seconds.labels("true" if streamed else "false", path).observe(
                time.perf_counter() - started
            )

    def capture_failed(self) -> None:
        self.capture_failures.inc()

    def capture_spooled_one(self) -> None:
        self.capture_spooled.inc()

    def recall_failed(self) -> None:
        self.recall_failures.inc()

    # -- called from the worker -----------------------------------------------------------
    def extraction_attempt(self, ok: bool, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        """One extraction call finished (``ok``) or failed; tokens as the provider reported them."""
        self.extraction_attempts.labels("ok" if ok else "failed").inc()
        if prompt_tokens:
            self.extraction_tokens.labels("prompt").inc(prompt_tokens)
        if completion_tokens:
            self.extraction_tokens.labels("completion").inc(completion_tokens)

    def memory_refused(self, reason: str, source: str) -> None:
        """A guard refused a memory (``reason`` from ``memory.guards.REASONS``)."""
        self.memory_refusals.labels(source, reason).inc()

    def extraction_empty_answer(self) -> None:
        self.extraction_empty.inc()

    # -- scrape -----------------------------------------------------------------------------
    def set_state(
        self,
        jobs_by_status: Mapping[str, int] | None,
        loaded_scopes: int,
        held_vectors: int,
        spool_pending: int = 0,
    ) -> None:
        """Copy state kept elsewhere into the gauges, just before a scrape (``None``: the
        database could not be read; the job gauges keep their last values)."""
        for status in JOB_STATUSES if jobs_by_status is not None else ():
            self.jobs.labels(status).set(jobs_by_status.get(status, 0) if jobs_by_status else 0)
        self.index_scopes.set(loaded_scopes)
        self.index_vectors.set(held_vectors)
        self.spool_pending.set(spool_pending)

    def render(self) -> bytes:
        return generate_latest(self.registry)
