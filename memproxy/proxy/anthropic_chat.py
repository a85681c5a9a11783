"""Anthropic Messages ⇄ OpenAI chat completions, for ``/v1/messages`` to an OpenAI-wire provider.

The fast path's alternative to LiteLLM's Anthropic adapter (which costs ~13 ms per request
here, ``bench/prefix_cache.py``): the request is translated once, relayed to the provider's
``/chat/completions``, and its answer (JSON or chunk stream) translated back.

What is translated: ``system`` (string or text blocks) → a system message; text and image
blocks → content parts; ``tool_use`` blocks → ``tool_calls``; ``tool_result`` blocks → ``tool``
messages (placed before the user's other blocks, as OpenAI wants them right after the call);
``tools``/``tool_choice``; ``max_tokens``, ``temperature``, ``top_p``, ``stop_sequences``,
``metadata.user_id`` → ``user``; ``stream`` (with usage). Dropped, as they have no chat
meaning: ``cache_control`` (OpenAI caches prefixes itself), ``top_k``, ``thinking``, and
block types chat has no part for (documents, thinking, server tools). Finish reasons map
to Anthropic's stop reasons; token counts to ``usage``.

Invariants:
- Pure functions and one small state machine (``ChatStreamToEvents``); no I/O.
- The caller's body is never mutated.
- A stream always ends with ``message_delta`` + ``message_stop`` once the provider's stream
  ended (``finish``), and every block opened is closed, in order.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}  # fmt: skip


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat completions body for an Anthropic Messages body."""
    messages: list[dict[str, Any]] = []
    system = text_of(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            messages.extend(_chat_messages(message))
    chat: dict[str, Any] = {"model": body["model"], "messages": messages, "max_tokens": body["max_tokens"]}
    for name in ("temperature", "top_p"):
        if name in body:
            chat[name] = body[name]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata.get("user_id"):
        chat["user"] = str(metadata["user_id"])
    tools = [_chat_tool(t) for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name")]
    if tools:
        chat["tools"] = tools
    choice = _chat_tool_choice(body.get("tool_choice"))
    if choice is not None and tools:
        chat["tool_choice"] = choice
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def text_of(content: Any) -> str:
    """The text of a string or of a list of blocks (text blocks only)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _chat_messages(message: dict[str, Any]) -> list[dict[str, Any]]:
    role, content = message.get("role"), message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = [b for b in content or [] if isinstance(b, dict)]
    if role == "assistant":
        reply: dict[str, Any] = {"role": "assistant", "content": text_of(blocks) or None}
        calls = [_chat_call(b) for b in blocks if b.get("type") == "tool_use"]
        if calls:
            reply["tool_calls"] = calls
        return [reply]
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")), "content": _result_text(b)}
        for b in blocks if b.get("type") == "tool_result"
    ]  # fmt: skip
    parts = [part for b in blocks if (part := _chat_part(b)) is not None]
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append(
            {"role": "user", "content": parts if not only_text or len(parts) > 1 else parts[0]["text"]}
        )
    return out


def _chat_part(block: dict[str, Any]) -> dict[str, Any] | None:
    if block.get("type") == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if block.get("type") == "image" and isinstance(block.get("source"), dict):
        source = block["source"]
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
        else:
            url = str(source.get("url", ""))
        return {"type": "image_url", "image_url": {"url": url}}
    return None


def _result_text(block: dict[str, Any]) -> str:
    text = text_of(block.get("content"))
    return f"Error: {text}" if block.get("is_error") else text


def _chat_call(block: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(block.get("id", "")), "type": "function",
            "function": {"name": str(block.get("name", "")), "arguments": json.dumps(block.get("input") or {})}}  # fmt: skip


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": tool["name"],
        "parameters": tool.get("input_schema") or {"type": "object"},
    }
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: Any) -> Any:
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    if kind == "tool" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))


def to_message(chat: dict[str, Any], model: str) -> dict[str, Any]:
    """An Anthropic message for a chat completion (its first choice)."""
    choices = chat.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], dict) else {}
    reply = first.get("message") or {}
    content: list[dict[str, Any]] = []
    if reply.get("content"):
        content.append({"type": "text", "text": str(reply["content"])})
    for call in reply.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": str(call.get("id", "")), "name": str(function.get("name", "")),
                        "input": _arguments(function.get("arguments"))})  # fmt: skip
    return {
        "id": message_id(chat), "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": STOP_REASONS.get(str(first.get("finish_reason")), "end_turn"), "stop_sequence": None,
        "usage": _usage(chat.get("usage")),
    }  # fmt: skip


def message_id(chat: dict[str, Any]) -> str:
    return "msg_" + (str(chat.get("id") or "") or uuid.uuid4().hex)


def _arguments(raw: Any) -> Any:
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}


def _usage(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }


Event = tuple[str, dict[str, Any]]


class ChatStreamToEvents:
    """Chat completion chunks in, Anthropic stream events out (``message_start`` … ``message_stop``)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = False
        self.block = -1  # index of the open content block, -1: none
        self.open_kind: str | None = None
        self.tool_blocks: dict[int, int] = {}  # the chunk's tool call index -> block index
        self.stop_reason = "end_turn"
        self.finished = False  # the provider sent a finish reason: the answer is whole
        self.usage: dict[str, int] = {"input_tokens": 0, "output_tokens": 0}

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        if not self.started:
            self.started = True
            events.append(("message_start", {"type": "message_start", "message": {
                "id": message_id(chunk), "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": dict(self.usage)}}))  # fmt: skip
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and int(choice.get("index") or 0) == 0:
                events += self._delta(choice.get("delta") or {})
                if choice.get("finish_reason"):
                    self.finished = True
                    self.stop_reason = STOP_REASONS.get(str(choice["finish_reason"]), "end_turn")
        return events

    def _delta(self, delta: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        if delta.get("content"):
            if self.open_kind != "text":
                events += self._open({"type": "text", "text": ""}, "text")
            events.append(self._block_delta({"type": "text_delta", "text": str(delta["content"])}))
        for call in delta.get("tool_calls") or []:
            index = int(call.get("index") or 0)
            function = call.get("function") or {}
            if index not in self.tool_blocks:
                events += self._open({"type": "tool_use", "id": str(call.get("id", "")),
                                      "name": str(function.get("name", "")), "input": {}}, "tool_use")  # fmt: skip
                self.tool_blocks[index] = self.block
            if function.get("arguments") and self.tool_blocks[index] == self.block:
                events.append(
                    self._block_delta({"type": "input_json_delta", "partial_json": function["arguments"]})
                )
        return events

    def _open(self, block: dict[str, Any], kind: str) -> list[Event]:
        events = self._close()
        self.block += 1
        self.open_kind = kind
        events.append(("content_block_start", {"type": "content_block_start", "index": self.block,
                                               "content_block": block}))  # fmt: skip
        return events

    def _close(self) -> list[Event]:
        if self.open_kind is None:
            return []
        self.open_kind = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.block})]

    def _block_delta(self, delta: dict[str, Any]) -> Event:
        return ("content_block_delta", {"type": "content_block_delta", "index": self.block, "delta": delta})

    def finish(self) -> list[Event]:
        """The closing events, once the provider's stream ended (``[DONE]`` or its end)."""
        events = self.feed({}) if not self.started else []
        events += self._close()
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
                                         "usage": {"output_tokens": self.usage["output_tokens"]}}))  # fmt: skip
        events.append(("message_stop", {"type": "message_stop"}))
        return events


def frame(event: Event) -> bytes:
    name, data = event
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
