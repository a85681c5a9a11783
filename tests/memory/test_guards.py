"""Guards on every stored memory (pure functions): length, atomicity, statements, examples, duplicates."""

from __future__ import annotations

import pytest

from memproxy.memory.guards import (
    MemoryRefused,
    atomize,
    check_text,
    leaked_example,
    near_duplicate,
    not_a_fact,
    refusal,
)

# The 1.5B model's run-on from the recorded samples (tests/data/small-models.jsonl, line 30).
RUN_ON = (
    "User lives in Porto and has a golden retriever called Biscuit, who is three years old. The capital "
    "of Australia is Canberra. Tomás is a software engineer; we've been together five years. Next Friday "
    "I'm flying to Tokyo with my sister Inês for a week. I play the cello in a community orchestra every "
    "Tuesday evening, and I drink my coffee black, no sugar. The weather is lovely today, isn't it? I'm "
    "learning Japanese on Duolingo, I'm on a 40-day streak. My birthday is March 14, by the way."
)


def test_check_text_refuses_secrets_without_echoing_them_and_caps_length() -> None:
    with pytest.raises(MemoryRefused) as secret:
        check_text("The password for the hospital portal is hunter2.", 300)
    assert secret.value.reason == "secret" and secret.value.code == "secret_refused"
    assert secret.value.status == 400 and "hunter2" not in secret.value.message
    with pytest.raises(MemoryRefused) as long:
        check_text("x" * 301, 300)
    assert long.value.reason == "too_long" and "300" in long.value.message
    assert refusal("User lives in Porto", 300) is None


def test_a_run_on_is_split_into_its_sentences_and_each_fits() -> None:
    pieces = atomize(RUN_ON, 120)
    assert (
        pieces[0] == "User lives in Porto and has a golden retriever called Biscuit, who is three years old."
    )
    assert "The weather is lovely today, isn't it?" in pieces
    assert len(pieces) == 8 and all(len(p) <= 120 for p in pieces)
    assert atomize("User lives in Porto.", 120) == ["User lives in Porto."]
    assert atomize("User has a dog. His name is Biscuit.", 120) == ["User has a dog. His name is Biscuit."]
    assert atomize("User has a dog. It is old. The capital is Rome.", 120) == [
        "User has a dog.", "It is old.", "The capital is Rome."]  # fmt: skip
    assert atomize("word " * 40, 120) == [("word " * 40).strip()]  # one long sentence stays whole


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("The weather is lovely today, isn't it?", "question"),
        ("User lives in <city>", "placeholder"),
        ("User was born on <YYYY-MM-DD>", "placeholder"),
        ("Remember that <img src=x onerror=alert(1)> and <script>", None),  # text, not a template
        ("User lives in Porto", None),
    ],
)
def test_questions_and_placeholders_are_not_facts(text: str, reason: str | None) -> None:
    assert not_a_fact(text, ["<city>", "<YYYY-MM-DD>"]) == reason


def test_a_prompt_example_leaks_only_when_the_turn_never_said_it() -> None:
    examples = ["User lives in Paris"]
    leaked = "User lives in Paris and has a golden retriever called Biscuit"  # recorded sample, line 24
    assert leaked_example(leaked, examples, "I play the cello every Tuesday")
    assert not leaked_example("User lives in Paris", examples, "I just moved to Paris!")
    assert not leaked_example("User lives in Porto", examples, "I live in Porto")


@pytest.mark.parametrize(
    ("new", "old", "cosine", "same"),
    [
        ("User lives in Porto.", "user lives in porto", None, True),
        (
            "User has a golden retriever called Biscuit",
            "User has a golden retriever named Biscuit",
            None,
            False,
        ),
        (
            "User has a golden retriever called Biscuit",
            "User has a golden retriever called Biscuit now",
            None,
            True,
        ),
        ("User has a dog named Biscuit", "User owns a golden retriever called Biscuit", 0.96, True),
        ("User is 33 years old", "User is 34 years old", 0.99, False),  # a change, not a repeat
        ("User likes tea", "User likes coffee", 0.6, False),
        # Someone else's fact is never the user's (MiniLM cosine 0.947; 6 of 7 words shared).
        (
            "User's partner works as a nurse at Santa Maria Hospital.",
            "User works as a nurse at Santa Maria Hospital.",
            0.947,
            False,
        ),
        ("User works as a nurse at Santa Maria Hospital.", "User's sister works as a nurse.", 0.96, False),
        # New detail is kept (a second memory), not dropped as a repeat.
        (
            "User plays cello in a community band on Saturdays.",
            "User plays cello in a community band.",
            0.91,
            False,
        ),
        (
            "User plays cello in a community band.",
            "User plays cello in a community band on Saturdays.",
            0.91,
            True,
        ),
    ],
)
def test_near_duplicates(new: str, old: str, cosine: float | None, same: bool) -> None:
    assert near_duplicate(new, old, cosine) is same
