// The console's entry point: sign-in, the hash router and the status line.
// Routes live in the URL fragment (#/scope?user_id=...), so the server only ever serves
// static files; the fragment never carries the credential.

import { api, credential, forget, remember, whenUnauthorized } from "/ui/api.js";
import { fill, h } from "/ui/dom.js";
import { jobPage, jobsPage } from "/ui/jobs.js";
import { memoryPage } from "/ui/memory.js";
import { scopePage } from "/ui/scope.js";
import { scopesPage } from "/ui/scopes.js";

const main = document.getElementById("main");
const status = document.getElementById("status");
const nav = document.getElementById("nav");
const tenantLabel = document.getElementById("tenant");

// Who the credential is (GET /v1/whoami), asked once per sign-in: shown in the header, and
// the scopes page says why another credential sees other scopes.
let whoami = null;

function showTenant(me) {
  whoami = me;
  fill(tenantLabel, me ? ["Tenant ", h("code", { title: `auth mode: ${me.auth_mode}` }, me.tenant)] : null);
}

const ROUTES = {
  scopes: scopesPage,
  scope: scopePage,
  memory: memoryPage,
  jobs: jobsPage,
  job: jobPage,
};

/** Tell the user what happened (a polite live region; errors are marked as such). */
export function say(message, kind = "info") {
  fill(status, message ? h("p", { class: `note ${kind}` }, message) : null);
}

function signInPage(message) {
  nav.hidden = true;
  showTenant(null);
  const input = h("input", {
    id: "credential", type: "password", autocomplete: "off", required: true, spellcheck: false,
  });
  const error = h("p", { class: "note error", role: "alert", hidden: !message }, message || "");
  const form = h("form", { class: "card sign-in", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title" }, "Sign in"),
    h("p", {}, "Use the credential your apps send to memproxy: a memproxy key in keys mode, "
      + "your provider token in passthrough mode. It is kept in this browser tab only."),
    h("label", { for: "credential" }, "Credential"),
    input,
    error,
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    let me;
    try {
      me = await api("GET", "/v1/whoami", { token });
    } catch (failure) {
      error.hidden = false;
      error.textContent = failure.status === 401 ? "That credential was not accepted." : failure.message;
      return;
    }
    remember(token);
    showTenant(me);
    input.value = "";
    if (!location.hash || location.hash === "#/" || location.hash === "#") location.hash = "#/scopes";
    else route();
  });
  fill(main, form);
  input.focus();
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [name, query] = raw.split("?", 2);
  return { name: name || "scopes", params: new URLSearchParams(query || "") };
}

let generation = 0;

async function route(keepStatus) {
  if (keepStatus !== true) say("");
  if (!credential()) return signInPage();
  nav.hidden = false;
  if (!whoami) {
    try {
      showTenant(await api("GET", "/v1/whoami"));
    } catch (failure) {
      if (failure.status === 401) return; // whenUnauthorized has shown the sign-in page
      // The header is a nicety: the page itself still loads and says what went wrong.
    }
  }
  const { name, params } = parseHash();
  const page = ROUTES[name];
  const mine = ++generation;
  const view = h("div", { class: "page", "aria-busy": "true" }, h("p", { class: "muted" }, "Loading…"));
  fill(main, view);
  if (!page) {
    fill(view, h("h1", {}, "Not found"), h("p", {}, "There is no such page."));
    view.removeAttribute("aria-busy");
    return;
  }
  try {
    // A page renders into `view`; `refresh` re-runs the current route (after a change).
    await page(view, params, { say, refresh: () => route(true), stale: () => mine !== generation, whoami });
  } catch (failure) {
    if (mine !== generation || failure.status === 401) return;
    fill(view, h("h1", {}, failure.status === 404 ? "Not found" : "Something went wrong"),
      h("p", { role: "alert" }, failure.message));
  } finally {
    view.removeAttribute("aria-busy");
  }
  if (mine === generation) main.focus({ preventScroll: true });
}

whenUnauthorized((message) => {
  forget();
  signInPage(`Signed out: ${message}`);
});

document.getElementById("sign-out").addEventListener("click", () => {
  forget();
  location.hash = "#/scopes";
  signInPage("Signed out.");
});

window.addEventListener("hashchange", route);
route();
