// Scopes page: the tenant's users and agents, searchable by id, paged by cursor.

import { api } from "/ui/api.js";
import { fill, h, link, pagerNav, when } from "/ui/dom.js";

const PAGE = 50;

/** Why this credential sees these scopes and another sees others: a tenant per token or key. */
export function tenantHint(whoami) {
  if (!whoami) return "Each credential sees only its own tenant's scopes.";
  if (whoami.auth_mode === "passthrough") {
    return "In passthrough mode each token is its own tenant: another token (even another key of "
      + "the same provider account) sees other scopes, and this one sees only what was sent with it.";
  }
  return "Each memproxy key belongs to the tenant configured for it: a key of another tenant sees other scopes.";
}

export async function scopesPage(view, params, ctx) {
  const q = params.get("q") || "";
  const cursor = params.get("cursor") || "";
  const trail = (params.get("trail") || "").split(",").filter(Boolean);
  const result = await api("GET", "/v1/scopes", { query: { q: q || undefined, cursor: cursor || undefined, limit: PAGE } });

  const search = h("input", { id: "scope-search", type: "search", name: "q", value: q, spellcheck: false,
    placeholder: "user or agent id (part of it)" });
  const form = h("form", { class: "inline", role: "search" },
    h("label", { for: "scope-search" }, "Find a user or agent"), search,
    h("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = link("scopes", { q: search.value.trim() || undefined });
  });

  const rows = result.data.map((s) => h("tr", {},
    h("td", {}, h("a", { href: link("scope", { user_id: s.user_id, agent_id: s.agent_id }) },
      s.user_id || "(none)")),
    h("td", {}, s.agent_id || "(none)"),
    h("td", { class: "num" }, s.memories),
    h("td", { class: "num" }, s.expired_memories),
    h("td", { class: "num" }, s.jobs.pending + s.jobs.running),
    h("td", { class: s.jobs.dead ? "num bad" : "num" }, s.jobs.dead),
    h("td", {}, when(s.last_activity_at))));

  const pager = pagerNav("scopes", { q: q || undefined }, cursor, trail, result.next_cursor);

  fill(view,
    h("h1", {}, "Scopes"),
    h("p", { class: "muted" }, "Users and agents of ",
      ctx.whoami ? ["tenant ", h("code", {}, ctx.whoami.tenant)] : "your tenant", " with memories or jobs."),
    form,
    rows.length
      ? h("table", {},
        h("caption", { class: "sr-only" }, "Scopes"),
        h("thead", {}, h("tr", {}, ["User", "Agent", "Memories", "Expired", "Queued jobs", "Dead jobs",
          "Last activity"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows))
      : h("div", { class: "empty" }, q ? "No scope matches." : [
        h("p", {}, "No scopes yet: memories appear here once your apps chat through memproxy with this credential."),
        h("p", { class: "hint" }, tenantHint(ctx.whoami))]),
    pager);
  search.focus();
}
