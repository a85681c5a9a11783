"""Guards every stored memory passes, whatever wrote it: an extraction model or a person.

Invariants:
- Pure functions of texts (no I/O, no model): the same text always gets the same verdict,
  so a guard holds whatever a model answers.
- ``check_text`` is the gate of every write path (API create/patch/import, CLI import,
  extraction): a secret (``memproxy.memory.secrets``) or a text longer than
  ``memory.max_chars`` raises ``MemoryRefused``: a 400 on the API, a rejected operation
  on an extraction job. Refusals are counted by the caller's ``on_refused`` hook.
- Extraction adds the checks a person does not need: run-ons are split into sentences
  (``atomize``), questions and placeholders are not facts (``not_a_fact``), the prompt's
  own examples are not the user's (``leaked_example``), and a near-duplicate of an
  existing memory is not added again (``near_duplicate``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from memproxy.errors import ApiError
from memproxy.index.lexical import tokenize
from memproxy.memory.secrets import find_secret

# Why a memory was refused: the label values of ``memproxy_memory_refusals_total``.
REASONS = (
    "secret", "too_long", "question", "placeholder", "prompt_example", "duplicate", "collision",
    "invalid", "missing",
)  # fmt: skip

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9À-Ý])")
_NUMBER = re.compile(r"\d+")
# More sentences than this in one memory make it a run-on, whatever its length.
MAX_SENTENCES = 2
# Token-set overlap at or above which two memories say the same thing (lexical view).
DUPLICATE_JACCARD = 0.8
# Whose fact it is. "User works as a nurse" and "User's partner works as a nurse" share
# 6 of 7 words and have a MiniLM cosine of 0.947: without this they would be one memory.
RELATIONS = frozenset(
    """partner wife husband spouse fiance fiancee boyfriend girlfriend sister brother sibling mother
    mom mum father dad parent parents son daughter child children kid kids baby grandmother grandma
    grandfather grandpa grandson granddaughter aunt uncle cousin niece nephew friend colleague
    coworker boss manager neighbour neighbor flatmate roommate landlord teacher doctor""".split()
)

RefusalHook = Callable[[str, str], None]  # (reason, source)


class MemoryRefused(ApiError):
    """A memory text that no write path may store (a 400 on the API)."""

    def __init__(self, reason: str, message: str) -> None:
        code = (
            "secret_refused" if reason == "secret" else "memory_too_long" if reason == "too_long" else reason
        )
        super().__init__(400, message, param="text", code=code)
        self.reason = reason


def check_text(text: str, max_chars: int) -> None:
    """Refuse a secret or an over-long text (see the module doc). Never echoes a secret."""
    kind = find_secret(text)
    if kind is not None:
        raise MemoryRefused(
            "secret",
            f"text looks like it contains a secret ({kind.replace('_', ' ')}); memproxy never stores "
            "passwords, keys, tokens, card numbers or IBANs as memories",
        )
    if len(text) > max_chars:
        raise MemoryRefused(
            "too_long",
            f"text must be at most {max_chars} characters (memory.max_chars): one short fact per memory, "
            "so that it fits the recall budget",
        )


def refusal(text: str, max_chars: int) -> MemoryRefused | None:
    """``check_text`` as a value: the refusal, or None when the text may be stored."""
    try:
        check_text(text, max_chars)
    except MemoryRefused as exc:
        return exc
    return None


def split_sentences(text: str) -> list[str]:
    return [piece.strip() for piece in _SENTENCE_END.split(text.strip()) if piece.strip()]


def atomize(text: str, max_chars: int) -> list[str]:
    """One fact per memory: ``[text]`` when it is short, else its sentences (each still checked).

    A run-on — over ``max_chars``, or more than ``MAX_SENTENCES`` sentences ("User lives in
    Porto and has a dog called Biscuit. The capital of Australia is Canberra. …") — becomes
    its sentences. Two sentences stay together ("User has a dog. His name is Biscuit." needs
    both); a single sentence over the cap stays whole and is then refused as ``too_long``.
    """
    text = text.strip()
    sentences = split_sentences(text)
    if len(text) <= max_chars and len(sentences) <= MAX_SENTENCES:
        return [text]
    return sentences


def not_a_fact(text: str, placeholders: Iterable[str] = ()) -> str | None:
    """``question``, or ``placeholder`` when ``text`` carries one of the prompt's
    ``<placeholders>`` (only those: "<script>" in a memory is text, not a template)."""
    if text.rstrip().endswith("?"):
        return "question"
    folded = text.casefold()
    if any(p.casefold() in folded for p in placeholders):
        return "placeholder"
    return None


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def leaked_example(text: str, examples: Iterable[str], turn_text: str) -> bool:
    """True when ``text`` carries a prompt example the turn itself never mentioned.

    "User lives in Paris" (an old prompt example) inside a memory is a leak unless the
    conversation talks about Paris; the check is on the example's content words.
    """
    said = set(tokenize(turn_text))
    normalized = _norm(text)
    for example in examples:
        if _norm(example) in normalized:
            # The example's proper nouns ("Paris") tell a leak from a coincidence.
            names = [w.casefold() for w in re.findall(r"\b[A-Z]\w+", example) if w != "User"]
            own = names or [w for w in tokenize(example) if w != "user"]
            if not own or not all(w in said for w in own):
                return True
    return False


def _tokens(text: str) -> set[str]:
    return set(tokenize(text)) or set(re.findall(r"\w+", text.casefold()))


def near_duplicate(new: str, old: str, cosine: float | None = None, cosine_min: float = 0.95) -> bool:
    """Same fact, differently worded: token-set Jaccard ≥ 0.8 with no word ``old`` lacks, or
    embedding cosine ≥ ``cosine_min``.

    Never duplicates, whatever their cosine: texts whose numbers differ ("33 years old" vs
    "34 years old" is a change, not a repeat), and texts about different people ("User's
    partner …" vs "User …", ``RELATIONS``). A new memory with a word the old one lacks
    ("… on Saturdays") adds detail, so the word overlap alone does not drop it.
    (``memory.near_duplicate_cosine`` 0.95 holds for MiniLM too: rewordings measured 0.90–0.98,
    different facts up to 0.947.)
    """
    if set(_NUMBER.findall(new)) != set(_NUMBER.findall(old)):
        return False
    a, b = _tokens(new), _tokens(old)
    if a & RELATIONS != b & RELATIONS:
        return False
    if a and b and a <= b and len(a) / len(b) >= DUPLICATE_JACCARD:
        return True
    return cosine is not None and cosine >= cosine_min
