"""The console's static bundle over real HTTP: what is served, with which security headers."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.proxy import KEYS, Proxy


@pytest.mark.parametrize("path", ["/", "/ui", "/ui/", "/ui/app.js", "/ui/app.css", "/ui/scope.js"])
def test_console_files_carry_a_strict_policy(proxy: Proxy, path: str) -> None:
    with proxy.http(None) as http:  # static files need no credential; the data behind them does
        response = http.get(path)
    assert response.status_code == 200
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "set-cookie" not in response.headers


def test_root_links_to_the_console_and_the_page_has_no_inline_script(proxy: Proxy) -> None:
    with proxy.http(None) as http:
        root = http.get("/")
        page = http.get("/ui")
    assert 'href="/ui"' in root.text
    assert page.headers["content-type"].startswith("text/html")
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page.text, flags=re.S)
    assert scripts and all(not body.strip() for body in scripts)  # only src= scripts
    assert not re.search(r"\son[a-z]+\s*=", page.text, flags=re.I)  # no inline event handlers


def test_only_bundle_files_are_served(proxy: Proxy) -> None:
    with proxy.http(None) as http:
        assert http.get("/ui/nope.js").status_code == 404
        assert http.get("/ui/..%2Fconsole.py").status_code == 404
        assert http.get("/ui/index.html").status_code == 404  # the page lives at /ui only
    with proxy.http(None) as http:
        script = http.get("/ui/app.js")
    assert script.headers["content-type"].startswith("text/javascript")


def test_bundle_never_writes_markup_from_data(proxy: Proxy) -> None:
    """Defence in depth next to the browser tests: no HTML-parsing sinks in the bundle."""
    with proxy.http(None) as http:
        sources = [http.get(f"/ui/{name}").text for name in
                   ("app.js", "api.js", "dom.js", "scopes.js", "scope.js", "memory.js", "jobs.js")]  # fmt: skip
    for source in sources:
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("//"))
        for sink in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ):
            assert sink not in code
        assert "cookie" not in code.lower() and "localStorage" not in code


def test_favicon_is_served_not_a_404(proxy: Proxy) -> None:
    with proxy.http(None) as http:
        icon = http.get("/favicon.ico")
        page = http.get("/ui")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg") and len(icon.content) < 2048
    assert icon.headers["x-content-type-options"] == "nosniff"
    assert 'rel="icon" href="/favicon.ico"' in page.text


def test_whoami_names_the_credentials_tenant(proxy: Proxy, keys_proxy: Proxy) -> None:
    with proxy.http("sk-whoami-one") as one, proxy.http("sk-whoami-two") as two:
        first, second = one.get("/v1/whoami").json(), two.get("/v1/whoami").json()
    # Passthrough: each token is its own tenant, a hash of it (never the token itself).
    assert first["auth_mode"] == second["auth_mode"] == "passthrough"
    assert re.fullmatch(r"pt_[0-9a-f]{40}", first["tenant"]) and first["tenant"] != second["tenant"]
    assert "sk-whoami-one" not in json.dumps(first)
    with keys_proxy.http(KEYS[1]["key"]) as beta:
        assert beta.get("/v1/whoami").json() == {"object": "whoami", "tenant": "beta", "auth_mode": "keys"}


def test_whoami_needs_a_credential_and_takes_no_parameters(keys_proxy: Proxy) -> None:
    with keys_proxy.http(None) as anonymous:
        refused = anonymous.get("/v1/whoami")
    assert refused.status_code == 401 and refused.json()["error"]["code"] is not None
    with keys_proxy.http("mp-key-not-configured-0000") as wrong:
        assert wrong.get("/v1/whoami").status_code == 401
    with keys_proxy.http(KEYS[0]["key"]) as alpha:
        typo = alpha.get("/v1/whoami", params={"tenant": "beta"})
    assert typo.status_code == 400 and typo.json()["error"]["param"] == "tenant"
