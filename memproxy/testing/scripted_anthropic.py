"""The scripted upstream's Anthropic Messages API (``POST /v1/messages``), for LiteLLM's native
Anthropic route (a model alias ``anthropic/…`` whose ``api_base`` is the fake).

Same per-model behaviour as its chat endpoint; errors and streams in Anthropic's shapes
(``message_start`` … ``message_stop``, ``{"type": "error", "error": {...}}``).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from starlette.responses import JSONResponse, Response

from memproxy.testing.scripted_replies import TOOL_ARGUMENTS, reply_for
from memproxy.testing.scripted_responses import as_messages

EventList = list[dict[str, Any]]
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error"}  # fmt: skip


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """The request as chat messages, so ``reply_for`` can answer it."""
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages += as_messages("system", body["system"])
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            messages += [{"role": "tool", "content": json.dumps(b.get("content"))} for b in results]
            content = [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
            if results and not content:
                continue
        messages += as_messages(str(message.get("role")), content)
    return {"model": body.get("model"), "messages": messages}


def failure(model: str) -> Response | None:
    match = re.search(r"fail-(\d{3})", model)
    if not match:
        return None
    status = int(match.group(1))
    kind = _ERROR_TYPES.get(status, "api_error")
    error = {"type": "error", "error": {"type": kind, "message": f"scripted failure {status}"}}
    return JSONResponse(error, status_code=status)


def message_object(body: dict[str, Any]) -> dict[str, Any]:
    model = str(body.get("model", ""))
    content: list[dict[str, Any]]
    if "tools" in model:
        tools = body.get("tools") or [{"name": "lookup"}]
        content = [{"type": "tool_use", "id": "toolu_scripted_1", "name": str(tools[0].get("name")),
                    "input": json.loads(TOOL_ARGUMENTS)}]  # fmt: skip
    else:
        content = [{"type": "text", "text": reply_for(chat_view(body))}]
    words = len(json.dumps(body.get("messages")).split())
    return {
        "id": "msg_" + uuid.uuid4().hex[:16],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if "tools" in model else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": words, "output_tokens": len(json.dumps(content).split())},
    }


def stream_events(message: dict[str, Any]) -> EventList:
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    events: EventList = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(message["content"]):
        events += _block_events(index, block)
    events.append({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                   "stop_sequence": None}, "usage": {"output_tokens": message["usage"]["output_tokens"]}})  # fmt: skip
    events.append({"type": "message_stop"})
    return events


def _block_events(index: int, block: dict[str, Any]) -> EventList:
    if block["type"] == "tool_use":
        args = json.dumps(block["input"])
        half = len(args) // 2
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in (args[:half], args[half:])]
        opened = {**block, "input": {}}
    else:
        words = block["text"].split(" ")
        pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
        deltas = [{"type": "text_delta", "text": p} for p in pieces]
        opened = {"type": "text", "text": ""}
    return [
        {"type": "content_block_start", "index": index, "content_block": opened},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]
