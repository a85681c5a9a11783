"""A turn of Anthropic's Messages API, as recall and capture see it.

- Recall's query: the text blocks of the newest user message that has any; a turn that
  only returns ``tool_result`` blocks recalls with the user message before it.
- Capture's new input: the user messages after the last assistant message — their text
  as a user message, each ``tool_result`` as a tool message — so a client resending its
  whole history does not re-capture it. ``system`` (the caller's prompt and memproxy's
  injected block alike) is never captured.
- The reply: text blocks and ``tool_use`` blocks as one chat-style assistant message.
- A stream is complete once ``message_delta`` brought a ``stop_reason``.
"""

from __future__ import annotations

import json
from typing import Any

from memproxy.proxy.recall import QUERY_MAX_CHARS
from memproxy.wire.message_text import clip_text


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def content_text(content: Any) -> str:
    """Text blocks joined; other blocks (images, documents) become ``[type]`` placeholders."""
    pieces = []
    for block in _blocks(content):
        if block.get("type") == "text":
            pieces.append(str(block.get("text", "")))
        elif block.get("type") not in ("tool_result", "tool_use", "thinking", "redacted_thinking"):
            pieces.append(f"[{block.get('type', 'attachment')}]")
    return "\n".join(pieces)


def query_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            text = content_text(message.get("content")).strip()
            if text:
                return clip_text(text, QUERY_MAX_CHARS)
    return ""


def new_input(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    start = 0
    for i, message in enumerate(messages):
        if message.get("role") == "assistant":
            start = i + 1
    captured: list[dict[str, Any]] = []
    for message in messages[start:]:
        if message.get("role") != "user":
            continue
        for block in _blocks(message.get("content")):
            if block.get("type") == "tool_result":
                captured.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                                 "content": content_text(block.get("content"))})  # fmt: skip
        text = content_text(message.get("content"))
        if text:
            captured.append({"role": "user", "content": text})
    return captured


def reply_from_message(message: dict[str, Any]) -> dict[str, Any] | None:
    texts = [str(b.get("text", "")) for b in _blocks(message.get("content")) if b.get("type") == "text"]
    calls = [
        {"id": b.get("id"), "type": "function",
         "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
        for b in _blocks(message.get("content")) if b.get("type") == "tool_use"
    ]  # fmt: skip
    if not texts and not calls:
        return None
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        reply["tool_calls"] = calls
    return reply


class AnthropicStreamAccumulator:
    """Rebuilds the streamed message's content blocks from the relayed events."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self.stop_reason: str | None = None

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        index = int(event.get("index") or 0)
        if kind == "content_block_start":
            self._blocks[index] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            self._delta(index, event.get("delta") or {})
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        if delta.get("type") == "text_delta":
            block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
        elif delta.get("type") == "input_json_delta":
            self._json[index] = self._json.get(index, "") + str(delta.get("partial_json", ""))

    @property
    def complete(self) -> bool:
        return self.stop_reason is not None

    def message(self) -> dict[str, Any] | None:
        blocks = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if block.get("type") == "tool_use" and index in self._json:
                try:
                    block["input"] = json.loads(self._json[index] or "{}")
                except json.JSONDecodeError:
                    block["input"] = {"_raw": self._json[index]}
            blocks.append(block)
        return reply_from_message({"content": blocks})
