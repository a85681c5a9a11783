"""Run a suite on both upstream paths.

``proxy_on_both_paths = on_both_paths("proxy")`` at a test module's top level overrides the
session's default ``proxy`` (fast path) in that module with a parametrized fixture: every
test using it runs once against a memproxy relaying the fake byte for byte (``fast``) and
once against one sending everything through LiteLLM (``litellm``, ``upstream.fast_path:
off``). The servers are session-scoped (``tests/conftest.py``: ``fast_<name>`` and
``litellm_<name>``), so this costs one extra server per path, not one per test.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.proxy import Proxy

PATHS = ("fast", "litellm")


def on_both_paths(name: str) -> Any:
    """A fixture named ``name`` that is ``fast_<name>`` or ``litellm_<name>`` per test."""

    @pytest.fixture(name=name, params=PATHS)
    def chosen(request: pytest.FixtureRequest) -> Proxy:
        handle: Proxy = request.getfixturevalue(f"{request.param}_{name}")
        return handle

    return chosen
