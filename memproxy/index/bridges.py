"""Second hop: follow the names in the best results to the memories that continue them.

Multi-hop questions fail a one-shot search in a predictable way. "Where does my partner
work?" finds "My partner Tiago is a firefighter", but the answer, "Tiago got a promotion
at the Alfama fire station", shares neither words nor much meaning with the question: it
is linked to it only through the name "Tiago". Likewise "Which office is my boss moving
to?" finds "Rui is relocating to the Madrid office" but not "My manager Rui …", and
"which car did I have before?" finds the sale of the Renault Clio but not the Clio's
breakdowns. This module picks the *bridge terms* of a result (capitalized, rare in the
scope, absent from the query: names of people, places, products) so that search can
fetch the memories that share them and rank each right below the result it came from.

Invariants:
- Pure functions over texts and document frequencies; the caller (``MemoryStore.search``)
  does the lookups, so bridged memories are hydrated through the same tenant/scope/expiry
  filter as every other result.
- A bridged memory never outranks its source: its score is at most the source's score
  times ``DECAY``. It inherits the source's evidence, not the query's, which is why only
  sources scoring at least ``MIN_SOURCE_SCORE`` lend it.
- A term found in a single memory bridges nothing; a term in more than ``MAX_DF``
  memories, in more than ``MAX_SHARE`` of a scope's memories (but allowing 2), or in half
  of them, is
  a topic, not an entity, and is skipped ("Monday", a city the user names daily, the
  "User" that every extracted memory starts with).
"""

from __future__ import annotations

import re

from memproxy.index.lexical import terms as index_terms

# How many of the best results lend their names, and how strong they must be.
SOURCES = 3
MIN_SOURCE_SCORE = 0.3
# Memories fetched per source, and a bridged memory's score relative to its source.
PER_SOURCE = 2
DECAY = 0.9
# A bridge term occurs in at least 2 and at most MAX_DF memories, and in no more than
# MAX_SHARE of the scope's memories (or 2, in a small scope).
MAX_DF = 4
MAX_SHARE = 0.1

_CAPITALIZED = re.compile(r"\b[^\W\d_][\w'’-]*", re.UNICODE)


def capitalized_terms(text: str) -> list[str]:
    """Index terms of the words written with a capital letter (names, places, products)."""
    found: list[str] = []
    for match in _CAPITALIZED.finditer(text):
        word = match.group(0)
        if word[0].isupper():
            found.extend(index_terms(word))
    return list(dict.fromkeys(found))


def bridge_terms(text: str, query: str, doc_freq: dict[str, int], scope_size: int) -> list[str]:
    """The terms of ``text`` worth following: capitalized, not in the query, and rare.

    ``doc_freq`` maps each candidate term (``capitalized_terms(text)``) to how many of the
    scope's ``scope_size`` memories contain it.
    """
    asked = set(index_terms(query))
    # Never a term in half the scope or more: in a tiny scope, "User" of "User's cat …".
    most = min(MAX_DF, max(2, int(scope_size * MAX_SHARE)), (scope_size - 1) // 2)
    return [
        term for term in capitalized_terms(text) if term not in asked and 2 <= doc_freq.get(term, 0) <= most
    ]


def bridged_score(source_score: float, own_score: float | None) -> float:
    """A bridged memory's score: ``DECAY`` of its source's, or its own relevance if higher
    (but never above the source it follows)."""
    lent = source_score * DECAY
    return lent if own_score is None else min(max(own_score, lent), source_score)
