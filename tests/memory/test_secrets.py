"""The secret filter: what it refuses, what it lets through (pure functions, no I/O)."""

from __future__ import annotations

import pytest

from memproxy.memory.secrets import find_secret, iban_ok, luhn_ok, shannon_entropy

# From the recorded small-model answers (tests/data/small-models.jsonl): stored, then recalled.
RECORDED = (
    "User works as a nurse at Santa Maria hospital and is allergic to shellfish and vegetarian. "
    "The password for the hospital portal is hunter2."
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (RECORDED, "password"),
        ("My password for the hospital portal is hunter2, can you remember it for me?", "password"),
        ("User's wifi passphrase: correct-horse-battery", "password"),
        ("hunter2 is the user's bank password", "password"),
        ("User's PIN is 4321", "password"),
        ("User's OpenAI key is sk-proj-abcdefghijklmnopqrstuvwx1234", "api_key"),
        ("Deploy token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "api_key"),
        ("AWS access key AKIAIOSFODNN7EXAMPLE", "api_key"),
        ("Slack bot uses xoxb-1234567890-abcdefghij", "api_key"),
        ("Header Bearer abcdefghijklmnopqrstuvwxyz012345", "api_key"),
        ("the client secret is Zq8vK2mN9xLp4RtY", "api_key"),
        ("User's card is 4111 1111 1111 1111", "card_number"),
        ("Card 5500-0000-0000-0004 expires soon", "card_number"),
        ("Salary goes to DE89 3704 0044 0532 0130 00", "iban"),
        ("User's IBAN is GB82WEST12345698765432", "iban"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", "private_key"),
        ("-----BEGIN PGP PRIVATE KEY BLOCK-----", "private_key"),
        ("Use Zq8vK2mN9xLp4RtY7wBc3Hd5Fg6 to unlock it", "token"),
    ],
)
def test_secrets_are_found_and_named(text: str, kind: str) -> None:
    assert find_secret(text) == kind


@pytest.mark.parametrize(
    "text",
    [
        "User lives in Porto",
        "User has a golden retriever called Biscuit, who is three years old.",
        "User wants to reset their password",
        "User's password manager is Bitwarden",
        "The password is changed every month",
        "User's birthday is March 14",
        "User's phone number is +351 912 345 678",
        "Order 4111 1111 1111 1112 was shipped",  # fails Luhn
        "Tracking number 1234567890123",  # does not start like a card
        "Memory id 5f0c7d1e9a2b4c6d8e0f1a2b3c4d5e6f",  # hex: no upper case, not random-looking
        "User prefers the Internationalization-Localization approach",
        "User is learning Japanese on Duolingo with a 40-day streak",
        "The vault door is painted green",
    ],
)
def test_ordinary_facts_pass(text: str) -> None:
    assert find_secret(text) is None


def test_checksums() -> None:
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert iban_ok("GB82 WEST 1234 5698 7654 32") and not iban_ok("GB83WEST12345698765432")
    assert shannon_entropy("aaaa") == 0.0 and shannon_entropy("abcd") == 2.0
