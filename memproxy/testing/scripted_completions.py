"""The scripted upstream's legacy completions API (``POST /v1/completions``).

Same per-model behaviour as its chat endpoint (``fail-NNN``, ``drop``, ``slow``, else a text
answer that names the memories it was given). A memory block memproxy put before the prompt
(a paragraph holding the memory marker) is read as the system message it stands for.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from memproxy.testing.scripted_replies import MEMORY_MARKER, reply_for


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """The prompt as chat messages: a leading memory block as a system message, the rest as the user's."""
    prompt = body.get("prompt")
    text = prompt[0] if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else prompt
    text = text if isinstance(text, str) else ""
    messages: list[dict[str, Any]] = []
    head, _, tail = text.partition("\n\n")
    if MEMORY_MARKER in head and tail:
        messages.append({"role": "system", "content": head})
        text = tail
    messages.append({"role": "user", "content": text})
    return {"model": body.get("model"), "messages": messages}


def completion_object(body: dict[str, Any]) -> dict[str, Any]:
    text = reply_for(chat_view(body))
    prompt_tokens = len(str(body.get("prompt", "")).split())
    return {
        "id": "cmpl-" + uuid.uuid4().hex[:12],
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                  "total_tokens": prompt_tokens + len(text.split())},
    }  # fmt: skip


def stream_chunks(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer as OpenAI streams it: one chunk per word, then the finish reason."""
    words = answer["choices"][0]["text"].split(" ")
    base = {k: answer[k] for k in ("id", "object", "created", "model")}
    chunks = [
        {**base, "choices": [{"index": 0, "text": word + (" " if i < len(words) - 1 else ""),
                              "logprobs": None, "finish_reason": None}]}
        for i, word in enumerate(words)
    ]  # fmt: skip
    chunks.append({**base, "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}]})
    return chunks
