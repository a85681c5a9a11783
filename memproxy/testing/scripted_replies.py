"""What the scripted model says, shared by the scripted upstream's three surfaces (chat
completions, Responses, Anthropic Messages): one leaf, so ``scripted_upstream`` can import
its surface modules and they it without a circle.
"""

from __future__ import annotations

import json
from typing import Any

from memproxy.wire.message_text import message_text

MEMORY_MARKER = "<memories>"
TOOL_ARGUMENTS = json.dumps({"query": "weather in Paris"})


def reply_for(body: dict[str, Any]) -> str:
    """A deterministic answer that shows which memories the model was given."""
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    last_user = next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    facts: list[str] = []
    for m in messages:
        text = message_text(m)
        if m.get("role") == "system" and MEMORY_MARKER in text:
            facts += [line[2:].strip() for line in text.splitlines() if line.startswith("- ")]
    answer = f"You said: {last_user}"
    if facts and "terse" not in str(body.get("model", "")):
        answer += " | I remember: " + "; ".join(facts)
    return answer
