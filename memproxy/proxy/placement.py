"""Where the recalled-memory block goes in a forwarded request, for each API surface.

Placements (``recall.placement``):
- ``after_system``: right after the caller's system prompt — a system message after the
  leading system/developer messages (chat), a developer message after the leading
  system/developer items of ``input`` (Responses; ``instructions`` stay where they are),
  a text block appended to ``system`` (Anthropic Messages).
- ``end``: after the caller's newest message, so everything the caller sent — system
  prompt, tools, every earlier turn and the newest message — stays a byte-identical prefix
  from one request to the next, and a changed memory set only changes the tail (provider
  prompt caches: OpenAI's automatic prefix cache, Anthropic's ``cache_control``). A system
  message at the end (chat), a developer message item at the end of ``input`` (Responses),
  a text block appended after the last block of the newest user message (Anthropic). A
  trailing assistant message (a prefill) stays last: the block goes just before it.

Invariants:
- The caller's body, messages and content blocks are never mutated; what changes is copied.
- The block is always its own message or its own content block, never merged into the
  caller's text; on Anthropic it carries no ``cache_control`` and the caller's
  breakpoints are neither moved nor dropped (blocks are only ever appended after them).
"""

from __future__ import annotations

from typing import Any, Literal

Placement = Literal["after_system", "end"]
PLACEMENTS: tuple[Placement, ...] = ("after_system", "end")
LEADING_ROLES = ("system", "developer")


def _role(item: Any) -> str | None:
    return item.get("role") if isinstance(item, dict) else None


def _after_leading_system(items: list[Any]) -> int:
    at = 0
    while at < len(items) and _role(items[at]) in LEADING_ROLES:
        at += 1
    return at


def _before_trailing_assistant(items: list[Any]) -> int:
    at = len(items)
    while at > 0 and _role(items[at - 1]) == "assistant":
        at -= 1
    return at if at > 0 else len(items)


def _insert(items: list[Any], block: dict[str, Any], placement: Placement) -> list[Any]:
    at = _after_leading_system(items) if placement == "after_system" else _before_trailing_assistant(items)
    return [*items[:at], block, *items[at:]]


def place_chat(body: dict[str, Any], text: str, placement: Placement) -> dict[str, Any]:
    """A copy of a chat completions body with ``text`` as its own system message."""
    messages = _insert(list(body["messages"]), {"role": "system", "content": text}, placement)
    return {**body, "messages": messages}


def place_responses(body: dict[str, Any], text: str, placement: Placement) -> dict[str, Any]:
    """A copy of a Responses body with ``text`` as its own developer message item in ``input``."""
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
    block = {"type": "message", "role": "developer", "content": text}
    return {**body, "input": _insert(items, block, placement)}


def place_anthropic(body: dict[str, Any], text: str, placement: Placement) -> dict[str, Any]:
    """A copy of a Messages body with ``text`` as its own text block (system or newest user turn)."""
    block = {"type": "text", "text": text}
    if placement == "after_system":
        return {**body, "system": [*_blocks(body.get("system")), block]}
    messages = list(body["messages"])
    for at in range(len(messages) - 1, -1, -1):
        if _role(messages[at]) == "user":
            messages[at] = {**messages[at], "content": [*_blocks(messages[at].get("content")), block]}
            return {**body, "messages": messages}
    return {**body, "system": [*_blocks(body.get("system")), block]}  # no user turn: nowhere else


def _blocks(content: Any) -> list[Any]:
    """Anthropic content as a block list (a string is one text block, the same prompt)."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else [content]
