"""The IBAN guard (issue 24, finding 6) through the real server: ordinary text that only looks
like letters and digits is stored; real IBANs and card numbers are still refused, and then
nothing of them is stored."""

from __future__ import annotations

import random
import string
import uuid

import pytest

from memproxy.auth import passthrough_tenant
from tests.support.memory_flow import query
from tests.support.proxy import Proxy

REAL_IBANS = [
    "DE89 3704 0044 0532 0130 00",  # grouped in fours
    "GB82WEST12345698765432",  # ungrouped, letters in the BBAN
    "FR14 2004 1010 0505 0001 3M02 606",
    "NO9386011117947",  # the shortest (15)
    "de89370400440532013000",  # lower case
]
CARDS = ["4111 1111 1111 1111", "5555-5555-5555-4444", "378282246310005"]


def _post(proxy: Proxy, token: str, text: str) -> tuple[int, dict[str, object]]:
    with proxy.http(token) as http:
        response = http.post("/v1/memories", json={"user_id": "u", "text": text})
    return response.status_code, response.json()


def _stored_texts(proxy: Proxy, token: str) -> list[str]:
    rows = query(proxy, "SELECT text FROM memories WHERE tenant = ?", (passthrough_tenant(token),))
    return [str(r[0]) for r in rows]


def test_the_reported_random_alphanumerics_are_stored(proxy: Proxy) -> None:
    token = "sk-iban-" + uuid.uuid4().hex
    status, body = _post(proxy, token, "zq865851df kyfd158568")
    assert status == 201, body
    assert _stored_texts(proxy, token) == ["zq865851df kyfd158568"]


def test_random_alphanumeric_words_are_not_taken_for_ibans(proxy: Proxy) -> None:
    """60 strings of the reported shape, some starting with a real country code: all stored
    (mod 97 alone refused about one in 97 of these)."""
    rng = random.Random(24)
    alnum = string.ascii_lowercase + string.digits
    texts = []
    for i in range(60):
        head = rng.choice(["de", "gb", "fr", "nl", "zq", "xx"]) if i % 2 else "".join(rng.choices(alnum, k=2))
        texts.append(head + "".join(rng.choices(alnum, k=8)) + " " + "".join(rng.choices(alnum, k=10)))
    token = "sk-iban-" + uuid.uuid4().hex
    refused = [(t, body) for t in texts for status, body in [_post(proxy, token, t)] if status != 201]
    assert refused == []
    assert sorted(_stored_texts(proxy, token)) == sorted(texts)


@pytest.mark.parametrize("secret", REAL_IBANS + CARDS)
def test_real_ibans_and_card_numbers_are_still_refused(proxy: Proxy, secret: str) -> None:
    token = "sk-iban-" + uuid.uuid4().hex
    # Followed by words: the match must stop at the IBAN's own length, not run into "is".
    status, body = _post(proxy, token, f"Salary account {secret} is the one to use")
    assert status == 400, body
    error = body["error"]
    assert isinstance(error, dict)
    assert error["code"] == "secret_refused" and error["param"] == "text"
    kind = "card number" if secret in CARDS else "iban"
    assert kind in str(error["message"])
    assert secret not in str(error["message"])  # never echoed
    assert _stored_texts(proxy, token) == []
