"""Applying an extraction's operations under the guards: what is stored, and what is not and why.

Two steps around the worker's embedding and search calls:
``plan`` (pure) turns the model's operations into guarded ones; ``apply_planned`` runs
inside the transaction that completes the batch's jobs.

Invariants:
- A memory is deleted only by an explicit DELETE. An UPDATE whose new text is another
  memory's (exactly or nearly) is a no-op reported as ``collision``, never a delete (a
  recorded answer rewrote the user's name memory into another memory's text; the old
  "superseded" rule then deleted the name).
- Every extracted text passes ``memory.guards``: relative dates are made absolute first
  (``outbox.dates``); a run-on is split into sentences, each checked on its own; secrets,
  over-long sentences, questions, placeholders and leaked prompt examples are refused; a
  near-duplicate of a memory of the scope (the store's search candidates plus this batch's
  own writes) is not added again.
- An UPDATE of a run-on that only *appends* sentences to its memory becomes ADDs of the new
  sentences; one that rewrites a one-sentence memory updates it with the closest new
  sentence and adds the others; one that rewrites a run-on memory is refused (which
  sentence replaces which old fact cannot be told).
- Every operation not applied is in the report with its reason; nothing vanishes silently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from memproxy.index.lexical import tokenize
from memproxy.memory import guards, rows
from memproxy.memory.rows import DuplicateMemory, Memory
from memproxy.outbox import dates
from memproxy.outbox.operations import Operation, Rejected
from memproxy.outbox.prompt import PLACEHOLDERS, PROMPT_EXAMPLES
from memproxy.scope import Scope
from memproxy.storage.engine import Connection

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Planned:
    """A guarded operation: ``index`` is the model's operation it came from."""

    index: int
    op: str
    text: str | None = None
    memory_id: str | None = None
    local_id: str | None = None
    said: str | None = None  # the text as the model wrote it, before dates were resolved


@dataclass
class Report:
    """What one extraction did, stored on each of the batch's jobs (``GET /v1/jobs/{id}``)."""

    applied: dict[str, int] = field(default_factory=lambda: {"ADD": 0, "UPDATE": 0, "DELETE": 0})
    rejected: list[Rejected] = field(default_factory=list)
    empty_answer: bool = False

    def to_api(self) -> dict[str, Any]:
        return {"applied": dict(self.applied), "rejected": [r.to_api() for r in self.rejected],
                "empty_answer": self.empty_answer}  # fmt: skip


@dataclass
class Context:
    """What ``plan`` judges against: the turn, its dates, the memories the model saw."""

    turns: list[dates.Turn]
    shown: dict[str, Memory]  # memory id → memory, as listed in the prompt
    max_chars: int
    said: dict[str, str] = field(default_factory=dict)  # guarded piece → as the model wrote it


_FIRST_PERSON = re.compile(r"\b(?:i|i'm|im|i've|i'd|my|me|we|we're|we've|our)\b", re.I)
_REQUEST = re.compile(
    r"^\W*(?:can|could|would|will) you\b|^\W*(?:tell|show|give|help|remind) me\b|^\W*(?:suggest|explain|write)\b",
    re.I,
)


def states_facts(user_text: str) -> bool:
    """Whether a turn plainly states something about the user (a first-person statement of
    four words or more that is neither a question nor a request). Used only to flag an
    empty extraction answer for a human to look at, never to invent a memory."""
    for sentence in guards.split_sentences(user_text.replace("\n", ". ")):
        if sentence.rstrip().endswith("?") or _REQUEST.search(sentence):
            continue
        if _FIRST_PERSON.search(sentence) and len(sentence.split()) >= 4:
            return True
    return False


def _text_refusal(text: str, ctx: Context) -> tuple[str, str] | None:
    refused = guards.refusal(text, ctx.max_chars)
    if refused is not None:
        return refused.reason, refused.message
    reason = guards.not_a_fact(text, PLACEHOLDERS)
    if reason is not None:
        return reason, f"not a statement about the user ({reason})"
    turn_text = "\n".join(text for _, text in ctx.turns)
    if guards.leaked_example(text, PROMPT_EXAMPLES, turn_text):
        return "prompt_example", "copies an example of the prompt that the conversation never mentioned"
    return None


def _pieces(op: Operation, n: int, ctx: Context, rejected: list[Rejected]) -> tuple[list[str], list[str]]:
    """All sentences of an ADD/UPDATE text (dates resolved), and those that pass the guards;
    refused ones go to ``rejected``. ``ctx.said`` remembers each piece as the model wrote it."""
    assert op.text is not None
    pieces = []
    for original in guards.atomize(op.text, ctx.max_chars):
        piece = dates.resolve(original, ctx.turns)
        ctx.said[piece] = original
        pieces.append(piece)
    kept = []
    for piece in pieces:
        refused = _text_refusal(piece, ctx)
        if refused is None:
            kept.append(piece)
        else:
            rejected.append(Rejected(n, op.op, refused[0], refused[1], op.local_id))
    return pieces, kept


def _overlap(a: str, b: str) -> float:
    x, y = set(tokenize(a)), set(tokenize(b))
    return len(x & y) / len(x | y) if x and y else 0.0


def _split_update(op: Operation, n: int, pieces: tuple[list[str], list[str]], ctx: Context,
                  rejected: list[Rejected]) -> list[Planned]:  # fmt: skip
    """A run-on UPDATE: appended sentences become ADDs; if it also rewrote a one-sentence
    memory, the new sentence closest to it is the UPDATE. Anything else is refused."""
    every, kept = pieces
    old = ctx.shown.get(op.memory_id or "")
    key = rows.normalize_text
    old_sentences = [dates.resolve(s, ctx.turns) for s in guards.split_sentences(old.text)] if old else []
    gone = {key(s) for s in old_sentences} - {key(p) for p in every}
    fresh = [p for p in kept if key(p) not in {key(s) for s in old_sentences}]
    if old is not None and not gone:
        return [Planned(n, "ADD", p) for p in fresh]
    if old is not None and len(old_sentences) == 1 and fresh:
        best = max(fresh, key=lambda p: _overlap(p, old.text))
        if _overlap(best, old.text) > 0:
            return [Planned(n, "UPDATE", best, op.memory_id, op.local_id)] + [
                Planned(n, "ADD", p) for p in fresh if p is not best
            ]
    rejected.append(Rejected(n, "UPDATE", "too_long", "a run-on that rewrites a run-on memory; its sentences "
                             "cannot be matched to the old ones", op.local_id))  # fmt: skip
    return []


def plan(operations: Sequence[Operation], ctx: Context) -> tuple[list[Planned], list[Rejected]]:
    """Guarded operations to apply, and the refusals (see the module doc)."""
    planned: list[Planned] = []
    rejected: list[Rejected] = []
    for n, op in enumerate(operations):
        if op.op == "DELETE":
            planned.append(Planned(n, "DELETE", memory_id=op.memory_id, local_id=op.local_id))
            continue
        every, kept = _pieces(op, n, ctx, rejected)
        if op.op == "ADD":
            planned += [Planned(n, "ADD", p) for p in kept]
        elif len(every) > 1:
            planned += _split_update(op, n, (every, kept), ctx, rejected)
        elif kept:
            planned.append(Planned(n, "UPDATE", kept[0], op.memory_id, op.local_id))
    return [replace(p, said=ctx.said.get(p.text or "")) for p in planned], rejected


def _cosine(a: Vector | None, blob: bytes | None) -> float | None:
    if a is None or blob is None or len(blob) != a.size * 4:
        return None
    return float(np.dot(a.reshape(-1), np.frombuffer(blob, dtype=np.float32)))


@dataclass
class Writer:
    """``apply_planned``'s state for one batch, inside its transaction."""

    conn: Connection
    scope: Scope
    identity: str
    session_id: str
    now: float
    job_ids: list[str]
    cosine_min: float
    report: Report
    written: list[int] = field(default_factory=list)  # nums this batch added or updated

    def _twin(
        self, p: Planned, vector: Vector | None, candidates: Sequence[int], skip: str | None
    ) -> Memory | None:
        """An existing memory that says what ``p`` says, as written or with its dates resolved
        (``skip``: the UPDATE's own target)."""
        assert p.text is not None
        nums = list(dict.fromkeys([*candidates, *self.written]))
        for memory, blob in rows.hydrate(self.conn, self.scope, nums, self.now, self.identity).values():
            if memory.id == skip:
                continue
            if guards.near_duplicate(p.text, memory.text, _cosine(vector, blob), self.cosine_min) or (
                p.said is not None and rows.normalize_text(p.said) == rows.normalize_text(memory.text)
            ):
                return memory
        return None

    def _refuse(self, p: Planned, reason: str, detail: str) -> None:
        self.report.rejected.append(Rejected(p.index, p.op, reason, detail, p.local_id))

    def delete(self, p: Planned) -> None:
        assert p.memory_id is not None
        if rows.delete_memory(self.conn, self.scope.tenant, p.memory_id, source="extracted", now=self.now,
                              job_ids=self.job_ids):  # fmt: skip
            self.report.applied["DELETE"] += 1
        else:
            self._refuse(p, "missing", "the memory was already gone")

    def add(self, p: Planned, vector: Vector | None, candidates: Sequence[int]) -> None:
        assert p.text is not None
        twin = self._twin(p, vector, candidates, None)
        if twin is not None:
            self._refuse(p, "duplicate", "an existing memory already says this")
            return
        try:
            memory = rows.insert_memory(self.conn, self.scope, p.text, embedding=vector, embed_model=self.identity,
                                        source="extracted", now=self.now, session_id=self.session_id,
                                        job_ids=self.job_ids)  # fmt: skip
        except DuplicateMemory:
            self._refuse(p, "duplicate", "an existing memory already says this")
            return
        self.written.append(memory.num)
        self.report.applied["ADD"] += 1

    def update(self, p: Planned, vector: Vector | None, candidates: Sequence[int]) -> None:
        assert p.text is not None and p.memory_id is not None
        current = rows.get_memory(self.conn, self.scope.tenant, p.memory_id, self.now)
        if current is None:  # deleted or expired while we extracted: the fact is still news
            self.add(replace(p, op="ADD", memory_id=None), vector, candidates)
            return
        if rows.normalize_text(current.text) == rows.normalize_text(p.text):
            self._refuse(p, "duplicate", "the UPDATE leaves the memory unchanged")
            return
        if self._twin(p, vector, candidates, skip=p.memory_id) is not None:
            self._refuse(p, "collision", "the new text is another memory's; both are kept as they were")
            return
        try:
            memory = rows.update_memory(self.conn, self.scope.tenant, p.memory_id, source="extracted", now=self.now,
                                        text=p.text, embedding=vector, embed_model=self.identity,
                                        job_ids=self.job_ids)  # fmt: skip
        except DuplicateMemory:
            self._refuse(p, "collision", "the new text is another memory's; both are kept as they were")
            return
        if memory is not None:
            self.written.append(memory.num)
        self.report.applied["UPDATE"] += 1


def apply_planned(
    writer: Writer,
    planned: Sequence[Planned],
    vectors: Sequence[Vector | None],
    candidates: Sequence[Sequence[int]],
) -> None:
    """Apply guarded operations in order (the caller owns the transaction)."""
    for p, vector, nums in zip(planned, vectors, candidates, strict=True):
        if p.op == "DELETE":
            writer.delete(p)
        elif p.op == "ADD":
            writer.add(p, vector, nums)
        else:
            writer.update(p, vector, nums)
