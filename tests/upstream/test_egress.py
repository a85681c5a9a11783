"""The egress facts: which hosts are local as written, memproxy's own address, safe model ids.

tests/security/test_provider_keys.py checks ``LOCAL_DEFAULTS`` against LiteLLM's source and the
routing decisions made with these facts; here the facts themselves, at their edges.
"""

from __future__ import annotations

import pytest

from memproxy.upstream.egress import (
    LOCAL_DEFAULTS,
    is_local_host,
    is_local_url,
    is_own_address,
    local_default,
    unsafe_id,
    url_address,
)

LOCAL = [
    "localhost", "LocalHost", "localhost.", "api.localhost", "127.0.0.1", "127.9.9.9", "::1", "[::1]",
    "0.0.0.0", "::", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "fd00::1", "fe80::1", "::ffff:127.0.0.1", "[::ffff:10.0.0.1]", "240.0.0.1",
]  # fmt: skip
PUBLIC = ["api.openai.com", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "localhost.example.com",
          "mylocalhost", "", None]  # fmt: skip


@pytest.mark.parametrize("host", LOCAL)
def test_loopback_private_link_local_and_unspecified_hosts_are_local(host: str) -> None:
    assert is_local_host(host)


@pytest.mark.parametrize("host", PUBLIC)
def test_public_addresses_and_names_are_not(host: str | None) -> None:
    assert not is_local_host(host)


def test_urls_are_judged_by_their_host() -> None:
    assert is_local_url("http://localhost:11434") and is_local_url("https://[fd00::2]:8443/v1")
    assert is_local_url("http://user:pw@127.0.0.1/x")  # userinfo is not the host
    assert not is_local_url("https://127.0.0.1.nip.io/v1")  # a public name, whatever DNS says
    assert not is_local_url("https://api.openai.com/v1") and not is_local_url("not a url")
    assert not is_local_url("http://[::1")  # unparseable: not judged local, and no exception


def test_url_address_defaults_the_port_to_the_schemes() -> None:
    assert url_address("https://API.example.com/v1") == ("api.example.com", 443)
    assert url_address("http://h") == ("h", 80)
    assert url_address("http://[::1]:4000/v1") == ("::1", 4000)
    assert url_address("http://h:99999") is None and url_address("/relative/path") is None


@pytest.mark.parametrize(
    ("url", "own", "is_self"),
    [
        ("http://127.0.0.1:4000/v1", ("127.0.0.1", 4000), True),
        ("http://localhost:4000/v1", ("127.0.0.1", 4000), True),  # another loopback name
        ("http://[::1]:4000", ("0.0.0.0", 4000), True),  # bound to every interface
        ("http://127.0.0.1:4000", ("", 4000), True),
        ("http://memproxy.internal:4000", ("memproxy.internal", 4000), True),
        ("http://MEMPROXY.internal:4000", ("memproxy.internal", 4000), True),
        ("http://127.0.0.1:4001/v1", ("127.0.0.1", 4000), False),  # another port: another server
        ("http://10.0.0.5:4000", ("memproxy.internal", 4000), False),
        ("https://api.openai.com/v1", ("127.0.0.1", 443), False),
        ("http://127.0.0.1:4000", None, False),
    ],
)
def test_own_address(url: str, own: tuple[str, int] | None, is_self: bool) -> None:
    assert is_own_address(url, own) is is_self


def test_local_default_reports_whether_the_operator_chose_the_destination(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    assert local_default("ollama") == ("http://localhost:11434", False)
    monkeypatch.setenv("OLLAMA_API_BASE", "http://gpu-box:11434")
    assert local_default("ollama") == ("http://gpu-box:11434", True)
    assert local_default("ollama_chat") == ("http://gpu-box:11434", True)
    monkeypatch.setenv("OLLAMA_API_BASE", "")
    assert local_default("ollama") == ("http://localhost:11434", False)  # empty is unset
    assert local_default("openai") is None and local_default(None) is None


def test_every_listed_default_is_local() -> None:
    for provider, (url, _) in LOCAL_DEFAULTS.items():
        assert is_local_url(url), provider


@pytest.mark.parametrize(
    "value",
    ["", "..", "a/../b", "./a", "a/.", "gpt%2F..", "a%2e%2e", "a\\b", "a?b", "a#b", "a b", "a\tb", "a\nb",
     "a\x00b", "a\u200bb", "a\u00a0b"],
)  # fmt: skip
def test_ids_that_could_move_a_url_path_are_unsafe(value: str) -> None:
    assert unsafe_id(value) is not None


@pytest.mark.parametrize(
    "value", ["gpt-4o", "openai/gpt-4o-mini", "models/gemini-1.5-pro", "a...b", "v1.2", "org/model:tag", "ü"]
)
def test_ordinary_ids_are_safe(value: str) -> None:
    assert unsafe_id(value) is None
