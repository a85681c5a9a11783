"""Secret detection: the deterministic filter that keeps credentials out of memory.

A memory is injected into later prompts and exported; a password in it leaks to every
model call of that user. The extraction prompt asks the model not to store secrets, but
small models do it anyway (the recorded samples stored "the password for the hospital
portal is hunter2"), so every write path asks ``find_secret`` and refuses on a hit.

What counts, in the order checked (the first hit names the kind):
- ``private_key``: a PEM/PGP private key header.
- ``api_key``: a token with a provider's known prefix (``sk-``, ``ghp_``, ``AKIA``, ``xoxb-``,
  JWTs …), or a long letters-and-digits value introduced as a key, token or secret.
- ``password``: a value stated as a password, passphrase, PIN, passcode or one-time code
  ("password for X is Y", "Y is my wifi password").
- ``card_number``: 13–19 digits (spaces or dashes allowed) starting like a card network's
  number and passing the Luhn check.
- ``iban``: an IBAN country's code, two check digits and exactly as many alphanumerics as
  that country's IBANs have (spaces allowed between them), passing ISO 13616 mod 97. The
  country and its length matter as much as the checksum: mod 97 alone passes one random
  string in 97 ("zq865851df kyfd158568" did), and a length range let the match run on into
  the next word ("DE89 3704 0044 0532 0130 00 is mine" then failed the checksum and leaked).
- ``token``: a 24+ character run of letters, digits and ``-_+/=`` mixing upper case,
  lower case and digits with high Shannon entropy (random-looking, not a word or a hex id).

Pure functions, no I/O. False positives are preferred over leaks: a refused memory is
reported (API error, job report, metric), a stored secret is silent.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter

_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_KNOWN_PREFIXES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-(?:proj-|ant-(?:api\d\d-)?|or-v1-|svcacct-)?[A-Za-z0-9_\-]{20,}"
    r"|(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35}"
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{20,}"
    r"|hf_[A-Za-z0-9]{30,}|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_\-]{50,}"
    r"|SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r")"
)
_BEARER = re.compile(r"\bBearer\s+[A-Za-z0-9._\-+/=]{20,}")
_KEYWORD_VALUE = re.compile(
    r"\b(?:api[ _-]?key|access[ _-]?key|secret(?:[ _-]?key)?|client[ _-]?secret|(?:access |auth |api )?token"
    r"|private[ _-]?key)\b[^.\n]{0,30}?(?:\bis\b|:|=)\s*[\"'`]?(?P<value>[A-Za-z0-9_\-+/=.]{12,})",
    re.IGNORECASE,
)
_SECRET_WORD = (
    r"(?:password|passwd|passphrase|passcode|pass code|pin(?: code| number)?|security code"
    r"|one[- ]time (?:code|password)|otp|cvv|cvc)"
)
_PASSWORD = re.compile(
    rf"\b{_SECRET_WORD}s?\b(?:\s+(?:for|to|of|on|at)\s+[^.:;,=\n]{{1,60}}?)?\s*(?:\bis\b|\bwas\b|:|=)\s*"
    r"[\"'`]?(?P<value>[^\s\"'`]{3,})",
    re.IGNORECASE,
)
_PASSWORD_REVERSED = re.compile(
    rf"[\"'`]?(?P<value>[^\s\"'`]{{3,}})[\"'`]?\s+(?:is|was)\s+(?:also\s+)?"
    rf"(?:my|the|his|her|their|our|user's|the user's)\s+(?:[\w-]+\s+){{0,3}}{_SECRET_WORD}\b",
    re.IGNORECASE,
)
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
# Where an IBAN may begin: a country code and two check digits (the rest is per country).
_IBAN_START = re.compile(r"\b([A-Za-z]{2})\d{2}")
# IBAN length by country, from the SWIFT IBAN registry.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
    "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
    "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
    "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
    "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip
_TOKENISH = re.compile(r"[A-Za-z0-9_\-+/=]{24,}")
# Bits per character above which a mixed-case alphanumeric run looks random (English words
# and identifiers stay well below; a random base62 string of 24+ characters is above 4.2).
_ENTROPY_BITS = 3.8
# Values that follow "password is" in harmless sentences ("the password is changed").
_NOT_A_VALUE = frozenset(
    {"the", "a", "an", "not", "being", "changed", "reset", "expired", "required", "same"}
)


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum that every payment card number satisfies."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = ord(ch) - 48
        if i % 2 == 1:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def iban_ok(candidate: str) -> bool:
    """ISO 13616: a known country's length; the first four characters moved to the end,
    letters to 10..35, mod 97 == 1."""
    text = candidate.replace(" ", "").upper()
    if len(text) != _IBAN_LENGTHS.get(text[:2]) or not text[2:4].isdigit() or not text.isalnum():
        return False
    moved = text[4:] + text[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``'s own character distribution."""
    if not text:
        return 0.0
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random_looking(value: str) -> bool:
    mixed = (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )
    return mixed and shannon_entropy(value) >= _ENTROPY_BITS


def _stated_password(text: str) -> bool:
    for pattern in (_PASSWORD, _PASSWORD_REVERSED):
        for match in pattern.finditer(text):
            if match["value"].strip(".,;!?").casefold() not in _NOT_A_VALUE:
                return True
    return False


def _card_number(text: str) -> bool:
    for match in _CARD.finditer(text):
        digits = re.sub(r"[ -]", "", match.group())
        if 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn_ok(digits):
            return True
    return False


@functools.cache
def _iban_rest(length: int) -> re.Pattern[str]:
    """The ``length - 4`` characters after a country's check digits, a space allowed before
    each (grouped in fours or not), ending where the alphanumerics end."""
    return re.compile(rf"(?:[ ]?[A-Za-z0-9]){{{length - 4}}}(?![A-Za-z0-9])")


def _iban(text: str) -> bool:
    for start in _IBAN_START.finditer(text):
        length = _IBAN_LENGTHS.get(start[1].upper())
        rest = _iban_rest(length).match(text, start.end()) if length else None
        if rest is not None and iban_ok(start[0] + rest[0]):
            return True
    return False


def find_secret(text: str) -> str | None:
    """The kind of secret ``text`` contains (see the module doc), or None."""
    if _PRIVATE_KEY.search(text):
        return "private_key"
    if _KNOWN_PREFIXES.search(text) or _BEARER.search(text):
        return "api_key"
    for match in _KEYWORD_VALUE.finditer(text):
        value = match["value"]
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            return "api_key"
    if _stated_password(text):
        return "password"
    if _card_number(text):
        return "card_number"
    if _iban(text):
        return "iban"
    if any(_random_looking(m.group()) for m in _TOKENISH.finditer(text)):
        return "token"
    return None
