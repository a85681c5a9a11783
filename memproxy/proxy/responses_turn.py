"""A turn of OpenAI's Responses API, as recall and capture see it.

- Recall's query: the text of the newest user message in ``input`` (``input`` itself when
  it is a string). A turn that only sends tool results (``function_call_output``) after an
  earlier user message in the same ``input`` recalls with that message.
- Capture's new input: the user messages and tool results after the last item the model
  produced (assistant message, function call, reasoning…), so a client resending its whole
  history does not re-capture it, and with ``previous_response_id`` (history kept at the
  provider) only what this request sends is captured. System/developer items, the
  caller's and memproxy's injected one alike, are never captured.
- The reply: the response's assistant text and function calls, as one chat-style
  assistant message (the outbox stores chat-shaped messages whatever the surface).
"""

from __future__ import annotations

from typing import Any

from memproxy.proxy.recall import QUERY_MAX_CHARS
from memproxy.wire.message_text import clip_text

# Item types the model produces; a user turn starts after the last of them.
_MODEL_ITEM_SUFFIXES = ("_call", "reasoning")


def _items(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    return [item for item in raw or [] if isinstance(item, dict)]


def content_text(content: Any) -> str:
    """Text parts joined; other parts (images, files, audio) become ``[type]`` placeholders."""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        if "text" in part and part.get("type") in ("input_text", "output_text", "text"):
            pieces.append(str(part["text"]))
        else:
            pieces.append(f"[{part.get('type', 'attachment')}]")
    return "\n".join(pieces)


def query_text(body: dict[str, Any]) -> str:
    for item in reversed(_items(body)):
        if item.get("role") == "user":
            return clip_text(content_text(item.get("content")).strip(), QUERY_MAX_CHARS)
    return ""


def _produced_by_model(item: dict[str, Any]) -> bool:
    kind = str(item.get("type", ""))
    return item.get("role") == "assistant" or kind.endswith(_MODEL_ITEM_SUFFIXES)


def new_input(body: dict[str, Any]) -> list[dict[str, Any]]:
    items = _items(body)
    start = 0
    for i, item in enumerate(items):
        if _produced_by_model(item):
            start = i + 1
    captured: list[dict[str, Any]] = []
    for item in items[start:]:
        if item.get("role") == "user":
            captured.append({"role": "user", "content": content_text(item.get("content"))})
        elif item.get("type") == "function_call_output":
            output = item.get("output")
            captured.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else content_text(output)})  # fmt: skip
    return captured


def reply_from_response(response: dict[str, Any]) -> dict[str, Any] | None:
    """The assistant message of a Responses API ``response`` object (text and function calls)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message" and item.get("role") == "assistant":
            texts.append(content_text(item.get("content")))
        elif item.get("type") == "function_call":
            calls.append({"id": item.get("call_id"), "type": "function",
                          "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}})  # fmt: skip
    if not texts and not calls:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


class ResponsesStreamAccumulator:
    """The streamed turn's reply, from the final ``response.completed`` (or ``.incomplete``) event."""

    def __init__(self) -> None:
        self.response: dict[str, Any] | None = None
        self.response_id: str | None = None

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        response = event.get("response")
        if isinstance(response, dict) and response.get("id"):
            self.response_id = str(response["id"])
        if kind in ("response.completed", "response.incomplete") and isinstance(response, dict):
            self.response = response

    @property
    def complete(self) -> bool:
        return self.response is not None

    def message(self) -> dict[str, Any] | None:
        return reply_from_response(self.response) if self.response is not None else None
