"""The scripted upstream's OpenAI Responses API (``POST /v1/responses``, ``GET``/``DELETE /v1/responses/{id}``).

Same per-model behaviour as its chat endpoint (``fail-NNN``, ``hang``, ``drop``, ``slow``,
``tools``, else a text answer that names the memories it was given). Answers are kept by
id so ``previous_response_id``, ``GET`` and ``DELETE`` behave as OpenAI's do; a stream is
the typed events OpenAI sends (``response.created`` … ``response.completed``).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from memproxy.testing.scripted_replies import MEMORY_MARKER, TOOL_ARGUMENTS, reply_for

EventList = list[dict[str, Any]]


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """The request as chat messages, so ``reply_for`` can answer it (developer counts as system)."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call_output":
            messages.append({"role": "tool", "content": str(item.get("output", ""))})
        elif "role" in item:
            role = "system" if item["role"] == "developer" else item["role"]
            messages += as_messages(role, item.get("content"))
    return {"model": body.get("model"), "messages": messages}


def as_messages(role: str, content: Any) -> list[dict[str, Any]]:
    """One chat message of ``content``'s text parts; a part holding a memory block becomes
    its own system message (as memproxy may place it as its own content part)."""
    parts = content if isinstance(content, list) else [{"text": str(content or "")}]
    texts = [str(p.get("text", "")) for p in parts if isinstance(p, dict) and "text" in p]
    memories = [{"role": "system", "content": t} for t in texts if MEMORY_MARKER in t]
    own = " ".join(t for t in texts if MEMORY_MARKER not in t)
    return [*memories, {"role": role, "content": own}] if own or not memories else memories


def output_items(body: dict[str, Any], model: str) -> EventList:
    if "tools" in model:
        tools = body.get("tools") or [{"name": "lookup"}]
        return [
            {
                "type": "function_call",
                "id": "fc_" + uuid.uuid4().hex[:12],
                "call_id": "call_scripted_1",
                "name": str(tools[0].get("name", "lookup")),
                "arguments": TOOL_ARGUMENTS,
                "status": "completed",
            }
        ]
    text = reply_for(chat_view(body))
    return [
        {
            "type": "message",
            "id": "msg_" + uuid.uuid4().hex[:12],
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
        }
    ]


def response_object(body: dict[str, Any], output: EventList, status: str = "completed") -> dict[str, Any]:
    words = len(json.dumps(body.get("input")).split())
    produced = sum(len(json.dumps(item).split()) for item in output) or 1
    return {
        "id": "resp_" + uuid.uuid4().hex[:16],
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": body.get("model"),
        "output": output,
        "instructions": body.get("instructions"),
        "previous_response_id": body.get("previous_response_id"),
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "store": body.get("store", True),
        "temperature": 1.0,
        "top_p": 1.0,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "metadata": body.get("metadata") or {},
        "error": None,
        "incomplete_details": None,
        "usage": {
            "input_tokens": words,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": produced,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": words + produced,
        },
    }


def stream_events(response: dict[str, Any]) -> EventList:
    """The typed events of one streamed response, ``sequence_number`` in order."""
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    events: EventList = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    for index, item in enumerate(response["output"]):
        events += _item_events(index, item)
    events.append({"type": "response.completed", "response": response})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def _item_events(index: int, item: dict[str, Any]) -> EventList:
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "function_call":
        args = item["arguments"]
        half = len(args) // 2
        return [
            {"type": "response.output_item.added", "output_index": index,
             "item": {**item, "arguments": "", "status": "in_progress"}},
            {"type": "response.function_call_arguments.delta", **where, "delta": args[:half]},
            {"type": "response.function_call_arguments.delta", **where, "delta": args[half:]},
            {"type": "response.function_call_arguments.done", **where, "arguments": args, "name": item["name"]},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]  # fmt: skip
    text = item["content"][0]["text"]
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    words = text.split(" ")
    deltas = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
    at = {**where, "content_index": 0}
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": {**item, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", **at, "part": part},
        *({"type": "response.output_text.delta", **at, "delta": d, "logprobs": []} for d in deltas),
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": {**part, "text": text}},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]  # fmt: skip
