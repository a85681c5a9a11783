"""The text of chat messages, read the ways memproxy needs it.

Two readings of one message, on purpose:
- ``content_text`` keeps a record of every part (what capture stores): text parts as
  text, other parts (images, audio, files) as placeholders such as ``[image_url]``.
- ``message_text`` is only what can be searched: the text parts, nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def content_text(content: Any) -> str | None:
    """Text of a message's content; non-text parts (images, audio) become placeholders."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'attachment')}]")
        return "\n".join(parts)
    return str(content)


def message_text(message: dict[str, Any]) -> str:
    """The searchable text of one message: its text parts joined, other parts left out."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    return ""


def latest_user_text(messages: Sequence[Any], max_chars: int) -> str:
    """The latest user message's text (what recall searches with).

    Tool results and assistant turns after it are skipped; a text longer than
    ``max_chars`` keeps its start and its end, where questions usually are.
    """
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return clip_text(message_text(message).strip(), max_chars)
    return ""


def clip_text(text: str, max_chars: int) -> str:
    """A text longer than ``max_chars`` keeps its start and its end, where questions usually are."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return text[:half] + " … " + text[-half:]


def user_text(messages: Sequence[dict[str, Any]], max_chars: int) -> str:
    """Every user message's text, in order (what extraction looks up similar memories with)."""
    return "\n".join(message_text(m) for m in messages if m.get("role") == "user")[:max_chars]
