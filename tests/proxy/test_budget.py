"""Counting tokens offline: which encoding a model gets, that only bundled ones load, loading once.

tests/proxy/test_line_costs.py checks the counts recall fits memories with; here the choice of
encoding and the ``Tokenizers`` cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from memproxy.config import UpstreamSettings
from memproxy.proxy.budget import (
    BUNDLED,
    DEFAULT_ENCODING,
    Tokenizers,
    bundled_tokenizer_dir,
    count_tokens,
    encoding_name_for,
    use_bundled_tokenizers,
)


def test_every_bundled_encoding_is_a_file_litellm_ships() -> None:
    # tiktoken names its cache files after the sha1 of the download URL: a missing one would
    # mean a download attempt, which memproxy must never make.
    directory = bundled_tokenizer_dir()
    assert directory is not None
    shipped = {p.name for p in directory.iterdir()}
    for name in BUNDLED:
        url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
        assert hashlib.sha1(url.encode()).hexdigest() in shipped, name
    assert DEFAULT_ENCODING in BUNDLED


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("openai/gpt-4o-mini", "o200k_base"),  # the provider prefix is dropped
        ("azure/deployments/gpt-4", "cl100k_base"),
        ("text-davinci-003", "p50k_base"),
        ("davinci", DEFAULT_ENCODING),  # r50k_base: known to tiktoken, not bundled
        ("claude-3-5-sonnet", DEFAULT_ENCODING),
        ("", DEFAULT_ENCODING),
    ],
)
def test_a_model_gets_its_bundled_encoding_or_the_default(model: str, encoding: str) -> None:
    assert encoding_name_for(model) == encoding


def test_an_alias_is_counted_as_the_model_it_names() -> None:
    upstream = UpstreamSettings.model_validate(
        {"models": [{"name": "fast", "litellm_params": {"model": "openai/gpt-4o"}},
                    {"name": "gpt-4o", "litellm_params": {"model": "text-davinci-003"}}]}
    )  # fmt: skip
    assert encoding_name_for("fast", upstream) == "o200k_base"
    assert encoding_name_for("fast") == DEFAULT_ENCODING  # without the alias table: unknown
    assert encoding_name_for("gpt-4o", upstream) == "p50k_base"  # the alias wins over the real name


def test_use_bundled_tokenizers_keeps_an_operators_cache_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    use_bundled_tokenizers()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    use_bundled_tokenizers()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(bundled_tokenizer_dir())


def test_encodings_load_once_and_an_unloadable_one_falls_back_to_the_default() -> None:
    async def body() -> None:
        tokenizers = Tokenizers()
        first, second = await asyncio.gather(tokenizers.get("o200k_base"), tokenizers.get("o200k_base"))
        assert first is second and first.name == "o200k_base"
        assert await tokenizers.for_model("openai/gpt-4o") is first
        fallback = await tokenizers.get("no_such_encoding")
        assert fallback.name == DEFAULT_ENCODING and await tokenizers.get("no_such_encoding") is fallback

    asyncio.run(body())


def test_special_tokens_are_counted_as_text() -> None:
    async def body() -> None:
        encoding = await Tokenizers().get(DEFAULT_ENCODING)
        assert count_tokens(encoding, "") == 0
        assert count_tokens(encoding, "a memory mentioning <|endoftext|>") > 3

    asyncio.run(body())
