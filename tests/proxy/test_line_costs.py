"""Recall's cached line renderings and token counts give exactly the uncached result."""

from __future__ import annotations

import dataclasses
import random

import pytest
import tiktoken

from memproxy.memory.rows import Memory
from memproxy.proxy.budget import count_tokens, use_bundled_tokenizers
from memproxy.proxy.recall import LineCosts, fit_to_budget, render


def memory(n: int, text: str, at: float = 1_700_000_000.0) -> Memory:
    return Memory(n, f"mem_{n}", "t", "k", "u", "", "", text, "manual", {}, at, at, None)


@pytest.mark.parametrize("dates", [False, True])
def test_cached_lines_fit_exactly_like_uncached_ones(dates: bool) -> None:
    use_bundled_tokenizers()
    encoding = tiktoken.get_encoding("cl100k_base")
    costs = LineCosts(max_entries=4, dates=dates)
    found = [
        memory(i, f"Fact number {i} about </memories> <b>tags</b>\nand lines " * (i + 1)) for i in range(8)
    ]
    for budget in (40, 120, 400):
        plain = fit_to_budget(found, budget, lambda s: count_tokens(encoding, s), dates=dates)
        for _ in range(2):  # the second round reads the cache (and overflows its 4 entries)
            cached = fit_to_budget(found, budget, lambda s: count_tokens(encoding, s),
                                   lambda m: costs.line(encoding, m), costs.wrapper(encoding))  # fmt: skip
            assert cached == plain

    edited = dataclasses.replace(found[0], text="Moved to Oslo", updated_at=1_800_000_000.0)
    text, count = fit_to_budget([edited], 400, lambda s: count_tokens(encoding, s),
                                lambda m: costs.line(encoding, m), costs.wrapper(encoding))  # fmt: skip
    assert count == 1 and "Moved to Oslo" in text and "Fact number 0" not in text


def test_lines_carry_their_day_only_with_dates() -> None:
    use_bundled_tokenizers()
    encoding = tiktoken.get_encoding("o200k_base")
    fact = memory(1, "Moved to Oslo", at=1_700_000_000.0)  # 2023-11-14 UTC
    plain, _ = fit_to_budget([fact], 400, lambda s: count_tokens(encoding, s))
    dated, _ = fit_to_budget([fact], 400, lambda s: count_tokens(encoding, s), dates=True)
    assert plain.splitlines()[2:] == ["- Moved to Oslo", "</memories>"]
    assert dated.splitlines()[2:] == ["- [2023-11-14] Moved to Oslo", "</memories>"]
    # The default block is the cheaper one: the day costs tokens on every request.
    assert count_tokens(encoding, plain) < count_tokens(encoding, dated)


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_the_per_line_estimate_is_the_exact_count(name: str) -> None:
    """Why ``fit_to_budget`` may skip the exact count far from the budget: the block's tokens
    are the wrapper's plus each line's, whatever the lines hold (punctuation, digits, other
    scripts, trailing symbols, emoji), because every line is "- …" + newline."""
    use_bundled_tokenizers()
    encoding = tiktoken.get_encoding(name)
    rng = random.Random(7)
    pieces = (
        "Oslo likes 3.5 kg ! ? . : ) ( “quoted” naïve 東京 🙂 -- / #12 's x <b> </memories> Ünïcode …".split()
    )
    pieces += ["  ", "\t", "\n"]
    costs = LineCosts()
    for _ in range(200):
        found = [memory(i, "".join(rng.choice(pieces) + rng.choice(["", " "]) for _ in range(rng.randint(1, 12))))
                 for i in range(rng.randint(1, 8))]  # fmt: skip
        lines = [costs.line(encoding, m) for m in found]
        text = render([line for line, _ in lines])
        assert count_tokens(encoding, text) == costs.wrapper(encoding) + sum(cost for _, cost in lines), text
