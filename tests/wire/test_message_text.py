"""The two readings of a chat message: what capture records, and what search may use."""

from __future__ import annotations

from typing import Any

from memproxy.wire.message_text import clip_text, content_text, latest_user_text, message_text, user_text

MIXED: list[Any] = [
    {"type": "text", "text": "Look at this"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    {"type": "input_audio", "input_audio": {"data": "AAAA"}},
    {"type": "text", "text": "and this"},
    {"no_type": True},
    "not a part",
]


def test_capture_keeps_a_placeholder_for_every_part_search_only_the_text() -> None:
    assert content_text(MIXED) == "Look at this\n[image_url]\n[input_audio]\nand this\n[attachment]"
    # A part without a type counts as text (its text is empty here); non-text parts are left out.
    assert message_text({"role": "user", "content": MIXED}) == "Look at this and this "


def test_plain_none_and_odd_contents() -> None:
    assert content_text("plain") == "plain" and content_text(None) is None
    assert content_text(42) == "42" and content_text([]) == ""
    assert message_text({"role": "user", "content": "plain"}) == "plain"
    assert message_text({"role": "user"}) == "" and message_text({"role": "user", "content": 42}) == ""
    assert message_text({"role": "user", "content": [{"text": "untyped"}]}) == "untyped"


def test_the_query_is_the_newest_user_text_past_tool_and_assistant_turns() -> None:
    messages: list[Any] = [
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        "garbage",
        {"role": "user", "content": [{"type": "text", "text": "  new question  "}, {"type": "image_url"}]},
        {"role": "assistant", "tool_calls": [{"id": "c"}]},
        {"role": "tool", "tool_call_id": "c", "content": "tool output"},
    ]
    assert latest_user_text(messages, 100) == "new question"
    assert latest_user_text([{"role": "system", "content": "s"}], 100) == ""
    assert latest_user_text([], 100) == ""


def test_a_long_text_keeps_its_start_and_its_end() -> None:
    text = "START " + "x" * 1000 + " END?"
    clipped = clip_text(text, 100)
    assert clipped.startswith("START ") and clipped.endswith(" END?") and " … " in clipped
    assert len(clipped) <= 100 + len(" … ")
    assert clip_text("short", 5) == "short"  # at the limit: untouched
    assert latest_user_text([{"role": "user", "content": text}], 100) == clipped


def test_user_text_is_every_user_message_in_order_within_the_limit() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "not me"},
        {"role": "user", "content": [{"type": "text", "text": "two"}]},
        {"role": "tool", "content": "nor me"},
    ]
    assert user_text(messages, 100) == "one\ntwo"
    assert user_text(messages, 5) == "one\nt"
    assert user_text([], 10) == ""
