"""The memory console in real headless Chromium, against a real memproxy under uvicorn.

The data is made the way production makes it: chat turns through ``/v1/chat/completions``,
extracted by the worker (the scripted upstream's rule-based extractor answers). The walk
covers what an operator does: sign in, find the user, read the extracted memory, open its
history and the turn it came from, edit it, delete one, retry a dead job, forget the scope.
Attacker-controlled text must render as text; another tenant must see nothing.

Set ``MEMPROXY_SCREENSHOTS=1`` to refresh the README's screenshots in docs/screenshots.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from memproxy.auth import passthrough_tenant
from memproxy.testing.scripted_extractor import rule_extractor
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.browser import chromium, screenshot_dir, watch_dialogs
from tests.support.memory_flow import say, wait_job, wait_until
from tests.support.proxy import KEYS, Proxy

pytestmark = pytest.mark.slow

ALPHA, BETA = KEYS[0]["key"], KEYS[1]["key"]
IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "</script><script>alert(2)</script>"
TIMEOUT_MS = 30_000  # a loaded 2-core machine: generous, but every wait is a poll


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)  # assertions poll up to this long (5 s by default)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    return screenshot_dir(tmp_path)


def api(proxy: Proxy, key: str) -> httpx.Client:
    return proxy.http(key)


def sign_in(page: Page, proxy: Proxy, key: str) -> None:
    page.goto(proxy.url + "/ui")
    page.get_by_label("Credential").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Scopes")).to_be_visible()


def chat_into_memories(proxy: Proxy, user: str) -> dict[str, str]:
    """Turns through the chat endpoint, extracted by the worker; returns their job ids."""
    first = say(proxy, f"My name is Ana. I live in Lisbon. Remember that {IMG}", user=user, session="s1",
                token=ALPHA)  # fmt: skip
    wait_job(proxy.url, first.job_id, token=ALPHA)
    second = say(proxy, f"I moved to Porto. Remember that {SCRIPT}", user=user, session="s1", token=ALPHA)
    wait_job(proxy.url, second.job_id, token=ALPHA)
    return {"first": first.job_id, "second": second.job_id}


def dead_job(proxy: Proxy, fake: ScriptedUpstream, user: str) -> str:
    """A turn whose extraction answer is garbage until its job is dead."""

    def poisoned(body: dict[str, Any]) -> str:
        return "not json" if "poison" in json.dumps(body) else rule_extractor(body)

    fake.extractor = poisoned
    turn = say(proxy, "Remember that the poison pill is blue", user=user, session="s2", token=ALPHA)
    wait_job(proxy.url, turn.job_id, status="dead", timeout=60, token=ALPHA)
    fake.extractor = None  # healthy again: a retry will succeed
    return turn.job_id


def card(page: Page, text: str) -> Any:
    return page.locator("li.card.memory").filter(has=page.get_by_text(text, exact=True))


def test_operator_walks_the_console(
    keys_proxy: Proxy, fake: ScriptedUpstream, page: Page, shots: Path
) -> None:
    proxy = keys_proxy
    user = f"ana-{uuid.uuid4().hex[:8]}"
    jobs = chat_into_memories(proxy, user)
    try:
        dead = dead_job(proxy, fake, user)
    finally:
        fake.extractor = None
    with api(proxy, ALPHA) as http:  # neighbours in the tenant, so the list is a list
        for other, agent in (
            (f"ben-{user[4:]}", ""),
            (f"carla-{user[4:]}", "support-bot"),
            ("", f"bot-{user[4:]}"),
        ):
            http.post("/v1/memories", json={"user_id": other, "agent_id": agent, "text": "Prefers email"})
    fired = watch_dialogs(page)

    # Sign in; the credential is in sessionStorage only (no cookie, not in the URL).
    page.goto(proxy.url + "/ui")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
    page.screenshot(path=str(shots / "sign-in.png"))
    sign_in(page, proxy, ALPHA)
    expect(page.locator("#tenant")).to_have_text("Tenant alpha")  # which tenant this key is
    assert page.context.cookies() == []
    assert ALPHA not in page.url
    assert page.evaluate("sessionStorage.getItem('memproxy.credential')") == ALPHA

    # Find the user.
    expect(page.get_by_role("link", name=user)).to_be_visible()
    page.screenshot(path=str(shots / "scopes.png"), full_page=True)
    page.get_by_label("Find a user or agent").fill(user[4:])
    page.get_by_role("button", name="Search").click()
    row = page.locator("tbody tr").filter(has=page.get_by_role("link", name=user))
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(2)).to_have_text("4")  # name, city, two "remember that"
    expect(row.locator("td").nth(5)).to_have_text("1")  # the dead job
    page.get_by_role("link", name=user).click()

    # The extracted memories; hostile texts are shown as text and run nothing.
    expect(page.get_by_role("heading", name=f"user {user}")).to_be_visible()
    expect(card(page, "User lives in Porto")).to_have_count(1)
    expect(page.get_by_text(IMG, exact=True)).to_be_visible()
    expect(page.get_by_text(SCRIPT, exact=True)).to_be_visible()
    assert page.locator("main img, main script").count() == 0
    page.screenshot(path=str(shots / "scope.png"), full_page=True)

    # Hybrid search with scores.
    page.get_by_label("Search memories").fill("Porto")
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_role("heading", name="Search results")).to_be_visible()
    first = page.locator("li.card.memory").first
    expect(first.locator(".memory-text")).to_have_text("User lives in Porto")
    expect(first.locator(".score")).to_have_text(re.compile(r"^score [01]\.\d{3}$"))
    page.get_by_role("link", name="Clear search").click()

    # History: ADD Lisbon, UPDATE Lisbon → Porto, each with the turn it came from.
    card(page, "User lives in Porto").get_by_role("link", name="History & edit").click()
    events = page.locator("ol.timeline li")
    expect(events).to_have_count(2)
    expect(events.nth(1).locator(".old p")).to_have_text("User lives in Lisbon")
    expect(events.nth(1).locator(".new p")).to_have_text("User lives in Porto")
    page.screenshot(path=str(shots / "memory-history.png"), full_page=True)
    events.nth(1).get_by_role("link", name=f"turn {jobs['second']}").click()
    expect(page.get_by_role("heading", name=f"Job {jobs['second']}")).to_be_visible()
    expect(page.locator("li.message.user .content")).to_have_text(f"I moved to Porto. Remember that {SCRIPT}")
    expect(page.locator("li.message.assistant")).to_have_count(1)
    # What the extraction of that turn did: Lisbon → Porto updated, the script text added.
    expect(page.locator("#job-report .report-applied")).to_have_text(
        "1 added, 1 updated, 0 deleted, 0 refused."
    )
    page.screenshot(path=str(shots / "job-messages.png"), full_page=True)
    page.go_back()

    # Edit text, metadata and expiry.
    expect(page.get_by_role("heading", name="Edit")).to_be_visible()
    page.get_by_label("Text", exact=True).fill("User lives in Porto, Portugal")
    page.get_by_label("Metadata (JSON object)").fill('{"checked_by": "<b>ops</b>"}')
    page.get_by_label("Expires at (ISO-8601; empty for never)").fill("2099-01-01T00:00:00Z")
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("status")).to_have_text("Saved.")
    expect(page.locator("section.card.memory .memory-text")).to_have_text("User lives in Porto, Portugal")
    expect(events).to_have_count(3)
    with api(proxy, ALPHA) as http:
        memory = http.get("/v1/memories", params={"user_id": user, "source": "extracted",
                                                  "has_expiry": "true"}).json()["data"]  # fmt: skip
    assert [(m["text"], m["metadata"], m["expires_at"][:10]) for m in memory] == [
        ("User lives in Porto, Portugal", {"checked_by": "<b>ops</b>"}, "2099-01-01")
    ]

    # Delete one (the in-place confirmation is a second click, not a browser dialog).
    page.get_by_role("link", name=f"user {user}").click()
    name_card = card(page, "User's name is Ana")
    name_card.get_by_role("button", name="Delete").click()
    name_card.get_by_role("button", name="Really delete?").click()
    expect(page.get_by_role("status")).to_have_text(re.compile(r"^Deleted memory "))
    expect(card(page, "User's name is Ana")).to_have_count(0)
    with api(proxy, ALPHA) as http:
        texts = [m["text"] for m in http.get("/v1/memories", params={"user_id": user}).json()["data"]]
    assert "User's name is Ana" not in texts and len(texts) == 3

    # Retry the dead job; the worker then extracts it.
    page.get_by_role("link", name="1 dead").click()
    dead_row = page.locator("tbody tr").filter(has=page.get_by_role("link", name=dead))
    expect(dead_row).to_have_count(1)
    expect(dead_row.locator("td.error-text")).not_to_be_empty()
    page.screenshot(path=str(shots / "jobs.png"), full_page=True)
    page.get_by_role("button", name=f"Retry job {dead}").click()
    expect(page.get_by_role("status")).to_have_text(f"Job {dead} is pending again.")
    wait_job(proxy.url, dead, status="done", timeout=30, token=ALPHA)

    # Forget the scope behind a typed confirmation that shows what it erases.
    page.get_by_role("link", name="Back to the scope").click()
    forget = page.get_by_role("button", name="Forget this scope")
    expect(forget).to_be_disabled()
    page.get_by_label(re.compile("^Type the user id to confirm")).fill(user[:-1])
    expect(forget).to_be_disabled()
    page.get_by_label(re.compile("^Type the user id to confirm")).fill(user)
    forget.click()
    expect(page.get_by_role("alert")).to_contain_text("Forgotten. Erased 4 memories")
    with api(proxy, ALPHA) as http:
        assert http.get("/v1/memories", params={"user_id": user}).json()["data"] == []
        assert http.get("/v1/scopes", params={"user_id": user}).json()["data"] == []
    assert fired == []


def test_hostile_scope_ids_and_metadata_render_as_text(keys_proxy: Proxy, page: Page) -> None:
    user = f"<svg onload=alert(3)>{uuid.uuid4().hex[:6]}"
    with api(keys_proxy, ALPHA) as http:
        created = http.post("/v1/memories", json={
            "user_id": user, "agent_id": "</script><b>", "text": "plain fact",
            "metadata": {"note": "<iframe src=javascript:alert(4)>"}})  # fmt: skip
        assert created.status_code == 201, created.text
    fired = watch_dialogs(page)
    sign_in(page, keys_proxy, ALPHA)
    page.get_by_label("Find a user or agent").fill(user[-6:])
    page.get_by_role("button", name="Search").click()
    page.get_by_role("link", name=user).click()
    expect(page.get_by_role("heading", name=f"user {user} · agent </script><b>")).to_be_visible()
    expect(page.locator("li.card.memory pre")).to_contain_text("<iframe src=javascript:alert(4)>")
    assert page.locator("main svg, main iframe, main b, main script").count() == 0
    assert fired == []


def test_another_tenant_sees_none_of_the_scopes(keys_proxy: Proxy, page: Page) -> None:
    user = f"private-{uuid.uuid4().hex[:8]}"
    with api(keys_proxy, ALPHA) as http:
        memory = http.post("/v1/memories", json={"user_id": user, "text": "Alpha's secret"}).json()
    sign_in(page, keys_proxy, BETA)
    expect(page.get_by_role("link", name=user)).to_have_count(0)
    page.get_by_label("Find a user or agent").fill(user)
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_text("No scope matches.")).to_be_visible()

    page.goto(f"{keys_proxy.url}/ui#/scope?user_id={user}&agent_id=")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.get_by_text("Alpha's secret")).to_have_count(0)
    page.goto(f"{keys_proxy.url}/ui#/memory?id={memory['id']}")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.get_by_text("Alpha's secret")).to_have_count(0)


def test_a_rejected_credential_stays_signed_out(keys_proxy: Proxy, page: Page) -> None:
    page.goto(keys_proxy.url + "/ui")
    page.get_by_label("Credential").fill("mp-key-not-configured-0000")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("That credential was not accepted.")
    assert page.evaluate("sessionStorage.getItem('memproxy.credential')") is None
    wait_until(lambda: page.get_by_role("heading", name="Sign in").is_visible(), timeout=5)


def test_add_filter_export_and_import_from_the_page(keys_proxy: Proxy, page: Page, tmp_path: Path) -> None:
    user = f"porter-{uuid.uuid4().hex[:8]}"
    wait_job(
        keys_proxy.url, say(keys_proxy, "I work at Initech.", user=user, token=ALPHA).job_id, token=ALPHA
    )
    fired = watch_dialogs(page)
    sign_in(page, keys_proxy, ALPHA)
    page.goto(f"{keys_proxy.url}/ui#/scope?user_id={user}&agent_id=")
    expect(card(page, "User works at Initech")).to_have_count(1)

    # Add a manual memory with metadata and an expiry.
    page.get_by_label("Text", exact=True).fill("Prefers <em>tea</em> over coffee")
    page.get_by_label("Metadata, a JSON object (optional)").fill('{"via": "console"}')
    page.get_by_label("Expires at, ISO-8601 (optional)").fill("2099-06-01T00:00:00Z")
    page.get_by_role("button", name="Add memory").click()
    expect(page.get_by_role("status")).to_have_text(re.compile(r"^Added memory "))
    expect(card(page, "Prefers <em>tea</em> over coffee")).to_contain_text('"via": "console"')

    # Filters: source and expiry narrow the list.
    page.get_by_label("Source").select_option("manual")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("li.card.memory .memory-text")).to_have_text(["Prefers <em>tea</em> over coffee"])
    page.get_by_label("Source").select_option("")
    page.get_by_label("Expiry").select_option("false")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("li.card.memory .memory-text")).to_have_text(["User works at Initech"])

    # Export as JSON Lines, lose a memory, import the file back.
    with page.expect_download() as download:
        page.get_by_role("button", name="Export as JSON Lines").click()
    saved = tmp_path / "export.jsonl"
    download.value.save_as(saved)
    lines = [json.loads(line) for line in saved.read_text().splitlines()]
    assert sorted(line["text"] for line in lines) == [
        "Prefers <em>tea</em> over coffee",
        "User works at Initech",
    ]
    with api(keys_proxy, ALPHA) as http:
        manual = next(line for line in lines if line["source"] == "manual")
        assert http.delete(f"/v1/memories/{manual['id']}").status_code == 200
    page.get_by_label("Import JSON Lines").set_input_files(str(saved))
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.get_by_role("status")).to_have_text("Imported 1, skipped 1 (already there).")
    with api(keys_proxy, ALPHA) as http:
        back = http.get(f"/v1/memories/{manual['id']}").json()
    assert back["text"] == "Prefers <em>tea</em> over coffee" and back["metadata"] == {"via": "console"}
    assert fired == []


def test_passthrough_mode_signs_in_with_the_provider_token(proxy: Proxy, page: Page) -> None:
    token = f"sk-console-{uuid.uuid4().hex[:8]}"
    user = f"pt-{uuid.uuid4().hex[:8]}"
    with proxy.http(token) as http:
        assert (
            http.post("/v1/memories", json={"user_id": user, "text": "Has a passthrough tenant"}).status_code
            == 201
        )
    sign_in(page, proxy, token)
    page.get_by_role("link", name=user).click()
    expect(card(page, "Has a passthrough tenant")).to_have_count(1)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('memproxy.credential')") is None
    page.goto(f"{proxy.url}/ui#/scope?user_id={user}&agent_id=")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_text("Has a passthrough tenant")).to_have_count(0)


def test_a_new_token_is_told_it_is_its_own_tenant(proxy: Proxy, page: Page) -> None:
    """Signing in with a token that sent nothing yet: which tenant it is, and why it is empty."""
    token = f"sk-newcomer-{uuid.uuid4().hex[:8]}"
    sign_in(page, proxy, token)
    expect(page.locator("#tenant code")).to_have_text(passthrough_tenant(token))
    expect(page.locator(".empty")).to_contain_text("No scopes yet")
    expect(page.locator(".empty .hint")).to_contain_text("each token is its own tenant")
    # The tenant survives a reload (the credential is still in the tab; whoami is asked again).
    page.reload()
    expect(page.locator("#tenant code")).to_have_text(passthrough_tenant(token))


def test_jobs_open_on_a_tab_with_jobs_and_a_job_shows_what_was_refused(
    proxy: Proxy, fake: ScriptedUpstream, page: Page
) -> None:
    token = f"sk-jobs-{uuid.uuid4().hex[:8]}"
    user = f"refused-{uuid.uuid4().hex[:8]}"
    marker = uuid.uuid4().hex

    def with_a_secret(body: dict[str, Any]) -> str:
        if marker not in json.dumps(body):
            return rule_extractor(body)
        return json.dumps({"operations": [
            {"op": "ADD", "text": "User keeps a cactus"},
            {"op": "ADD", "text": "User's API key is sk-proj-" + "a1B2c3D4e5" * 4},
        ]})  # fmt: skip

    fake.extractor = with_a_secret
    try:
        turn = say(proxy, f"I keep a cactus ({marker})", user=user, token=token)
        wait_job(proxy.url, turn.job_id, token=token)
    finally:
        fake.extractor = None
    sign_in(page, proxy, token)
    page.get_by_role("link", name="Jobs", exact=True).click()
    # No dead job in this tenant: the page opens on "all", which lists the done one.
    expect(page.get_by_role("link", name="all", exact=True)).to_have_attribute("aria-current", "page")
    expect(page.get_by_text("No dead jobs.")).to_have_count(0)
    page.get_by_role("link", name=turn.job_id).click()
    expect(page.get_by_role("heading", name=f"Job {turn.job_id}")).to_be_visible()
    expect(page.locator("#job-report .report-applied")).to_have_text(
        "1 added, 0 updated, 0 deleted, 1 refused."
    )
    refused = page.get_by_role("list", name="Refused operations").locator("li")
    expect(refused).to_have_count(1)
    expect(refused).to_contain_text("ADD refused: it looks like a secret")
    expect(refused).not_to_contain_text("a1B2c3D4e5")  # the report never repeats the secret
    # The page's icon is served (browsers ask for /favicon.ico on every page).
    assert page.evaluate("fetch(document.querySelector('link[rel=icon]').href).then((r) => r.status)") == 200


def test_jobs_open_on_dead_when_there_are_dead_jobs(
    keys_proxy: Proxy, fake: ScriptedUpstream, page: Page
) -> None:
    user = f"dead-{uuid.uuid4().hex[:8]}"
    try:
        dead = dead_job(keys_proxy, fake, user)
    finally:
        fake.extractor = None
    sign_in(page, keys_proxy, ALPHA)
    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page.get_by_role("link", name="dead", exact=True)).to_have_attribute("aria-current", "page")
    expect(page.locator("tbody tr").filter(has=page.get_by_role("link", name=dead))).to_have_count(1)
