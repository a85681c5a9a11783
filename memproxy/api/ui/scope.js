// A scope's page: its counts, its memories (paged, filtered, searchable), adding one,
// export/import as JSON Lines, and forgetting the scope behind a typed confirmation.

import { api } from "/ui/api.js";
import { confirmButton, facts, fill, h, json, link, pagerNav, scopeLabel, when } from "/ui/dom.js";
import { parseExpiry, parseMetadata } from "/ui/memory.js";

const PAGE = 25;

/** The scope's summary, or a 404 -- also for another tenant's scope, which the API never lists. */
export async function scopeSummary(userId, agentId) {
  const found = await api("GET", "/v1/scopes", { query: { user_id: userId, agent_id: agentId, limit: 1 } });
  if (!found.data.length) {
    const missing = new Error("No such scope: it has no memories or jobs under this credential.");
    missing.status = 404;
    throw missing;
  }
  return found.data[0];
}

export async function scopePage(view, params, ctx) {
  const userId = params.get("user_id") || "";
  const agentId = params.get("agent_id") || "";
  const scope = await scopeSummary(userId, agentId);
  const ids = { user_id: userId, agent_id: agentId };
  const filters = { source: params.get("source") || "", has_expiry: params.get("has_expiry") || "" };
  const query = params.get("query") || "";

  const listing = h("section", { "aria-labelledby": "memories-title" });
  fill(view,
    h("p", { class: "crumbs" }, h("a", { href: link("scopes") }, "Scopes"), " / ", scopeLabel(userId, agentId)),
    h("h1", {}, scopeLabel(userId, agentId)),
    summary(scope, ids),
    listing,
    addForm(ids, ctx),
    transfer(ids, ctx),
    forgetSection(scope, ids, ctx));
  if (query) await searchResults(listing, ids, query, filters, ctx);
  else await memoryList(listing, ids, filters, params, ctx);
}

function summary(scope, ids) {
  const jobs = scope.jobs;
  return facts([
    ["Memories", `${scope.memories}`],
    ["Expired (hidden, awaiting purge)", `${scope.expired_memories}`],
    ["Jobs", h("span", {},
      h("a", { href: link("jobs", { ...ids, status: "pending" }) }, `${jobs.pending} pending`), ", ",
      h("a", { href: link("jobs", { ...ids, status: "running" }) }, `${jobs.running} running`), ", ",
      h("a", { href: link("jobs", { ...ids, status: "done" }) }, `${jobs.done} done`), ", ",
      h("a", { href: link("jobs", { ...ids, status: "dead" }), class: jobs.dead ? "bad" : "" }, `${jobs.dead} dead`))],
    ["Last activity", when(scope.last_activity_at)],
  ]);
}

function controls(ids, query, filters) {
  const box = h("input", { id: "memory-query", type: "search", value: query, spellcheck: false });
  const source = h("select", { id: "filter-source" },
    [["", "any source"], ["extracted", "extracted"], ["manual", "manual"]].map(([v, t]) =>
      h("option", { value: v, selected: filters.source === v }, t)));
  const expiry = h("select", { id: "filter-expiry" },
    [["", "any expiry"], ["true", "with an expiry"], ["false", "permanent"]].map(([v, t]) =>
      h("option", { value: v, selected: filters.has_expiry === v }, t)));
  const form = h("form", { class: "inline", role: "search" },
    h("label", { for: "memory-query" }, "Search memories"), box,
    h("label", { for: "filter-source" }, "Source"), source,
    h("label", { for: "filter-expiry" }, "Expiry"), expiry,
    h("button", { type: "submit" }, "Apply"),
    query ? h("a", { href: link("scope", { ...ids, ...clean(filters) }) }, "Clear search") : null);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = link("scope", { ...ids, query: box.value.trim() || undefined,
      ...clean({ source: source.value, has_expiry: expiry.value }) });
  });
  return form;
}

function clean(values) {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v));
}

async function memoryList(section, ids, filters, params, ctx) {
  const cursor = params.get("cursor") || "";
  const trail = (params.get("trail") || "").split(",").filter(Boolean);
  const page = await api("GET", "/v1/memories", {
    query: { ...ids, limit: PAGE, cursor: cursor || undefined, ...clean(filters) } });
  fill(section,
    h("h2", { id: "memories-title" }, "Memories"),
    controls(ids, "", filters),
    cards(page.data, ctx, false),
    pagerNav("scope", { ...ids, ...clean(filters) }, cursor, trail, page.next_cursor));
}

async function searchResults(section, ids, query, filters, ctx) {
  const found = await api("POST", "/v1/memories/search", { body: { ...ids, query, top_k: 50, min_score: 0 } });
  const shown = found.data.filter((m) => (!filters.source || m.source === filters.source)
    && (!filters.has_expiry || (m.expires_at !== null) === (filters.has_expiry === "true")));
  fill(section,
    h("h2", { id: "memories-title" }, "Search results"),
    controls(ids, query, filters),
    h("p", { class: "muted" }, `Hybrid search (vectors + keywords), best first: ${shown.length} shown.`),
    cards(shown, ctx, true));
}

function cards(memories, ctx, withScore) {
  if (!memories.length) return h("p", { class: "empty" }, "No memories here.");
  return h("ul", { class: "cards", "aria-label": "Memories" }, memories.map((m) => h("li", { class: "card memory" },
    h("p", { class: "memory-text" }, m.text),
    withScore ? h("p", { class: "score" }, `score ${m.score.toFixed(3)}`) : null,
    facts([
      ["id", h("code", {}, m.id)],
      ["source", m.source],
      ["session", m.session_id || "—"],
      ["metadata", Object.keys(m.metadata).length ? h("pre", {}, json(m.metadata)) : "—"],
      ["created", when(m.created_at)],
      ["updated", when(m.updated_at)],
      ["expires", m.expires_at ? when(m.expires_at) : "never"],
    ]),
    h("p", { class: "actions" },
      h("a", { href: link("memory", { id: m.id }), class: "button" }, "History & edit"),
      confirmButton("Delete", "Really delete?", async () => {
        await api("DELETE", `/v1/memories/${encodeURIComponent(m.id)}`);
        ctx.say(`Deleted memory ${m.id}.`);
        await ctx.refresh();
      })))));
}

function addForm(ids, ctx) {
  const text = h("textarea", { id: "new-text", rows: 2, required: true });
  const session = h("input", { id: "new-session", type: "text", spellcheck: false });
  const metadata = h("textarea", { id: "new-metadata", rows: 2, placeholder: "{}", spellcheck: false });
  const expires = h("input", { id: "new-expires", type: "text", placeholder: "2030-01-01T00:00:00Z", spellcheck: false });
  const form = h("form", { class: "card" },
    h("h2", {}, "Add a memory"),
    h("label", { for: "new-text" }, "Text"), text,
    h("label", { for: "new-session" }, "Session id (optional)"), session,
    h("label", { for: "new-metadata" }, "Metadata, a JSON object (optional)"), metadata,
    h("label", { for: "new-expires" }, "Expires at, ISO-8601 (optional)"), expires,
    h("button", { type: "submit" }, "Add memory"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const body = { ...ids, text: text.value };
      if (session.value.trim()) body.session_id = session.value.trim();
      const meta = parseMetadata(metadata.value);
      if (meta !== undefined) body.metadata = meta;
      const expiry = parseExpiry(expires.value);
      if (expiry !== null) body.expires_at = expiry;
      const memory = await api("POST", "/v1/memories", { body });
      ctx.say(`Added memory ${memory.id}.`);
      await ctx.refresh();
    } catch (failure) {
      ctx.say(failure.message, "error");
    }
  });
  return form;
}

function transfer(ids, ctx) {
  const download = h("button", { type: "button" }, "Export as JSON Lines");
  download.addEventListener("click", async () => {
    const response = await api("GET", "/v1/memories/export", { query: ids, raw: true });
    const blob = await response.blob();
    const a = h("a", { href: URL.createObjectURL(blob), download: "memories.jsonl" });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
    ctx.say("Export downloaded.");
  });
  const file = h("input", { id: "import-file", type: "file", accept: ".jsonl,.ndjson,application/x-ndjson,text/plain" });
  const upload = h("button", { type: "submit" }, "Import");
  const form = h("form", { class: "inline" }, h("label", { for: "import-file" }, "Import JSON Lines"), file, upload);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!file.files.length) return ctx.say("Choose a file to import.", "error");
    try {
      const result = await api("POST", "/v1/memories/import", { text: await file.files[0].text() });
      ctx.say(`Imported ${result.imported}, skipped ${result.skipped} (already there).`);
      await ctx.refresh();
    } catch (failure) {
      ctx.say(`Import refused: ${failure.message}`, "error");
    }
  });
  return h("section", { class: "card" }, h("h2", {}, "Export / import"),
    h("p", { class: "muted" }, "Lines keep their own user and agent ids; imports always go into your tenant."),
    download, form);
}

function forgetSection(scope, ids, ctx) {
  const expected = ids.user_id || ids.agent_id;
  const input = h("input", { id: "forget-confirm", type: "text", autocomplete: "off", spellcheck: false });
  const button = h("button", { type: "submit", class: "danger", disabled: true }, "Forget this scope");
  input.addEventListener("input", () => { button.disabled = input.value !== expected; });
  const outcome = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "card danger-zone" },
    h("h2", {}, "Forget this scope"),
    h("p", {}, `Erases for good: ${scope.memories + scope.expired_memories} memories with their history, `
      + `${Object.values(scope.jobs).reduce((a, b) => a + b, 0)} jobs with their captured messages, `
      + "the index entries and the snapshot file."),
    h("label", { for: "forget-confirm" }, `Type ${ids.user_id ? "the user id" : "the agent id"} to confirm: `,
      h("code", {}, expected)),
    input, button, outcome);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (input.value !== expected) return;
    button.disabled = true;
    const result = await api("DELETE", "/v1/memories", { query: ids });
    const d = result.deleted;
    fill(outcome, h("p", { class: "note ok", role: "alert" },
      `Forgotten. Erased ${d.memories} memories, ${d.history} history events, ${d.messages} messages, `
      + `${d.jobs} jobs, ${d.index_entries} index entries, ${d.snapshots} snapshot files.`));
    ctx.say("Scope forgotten.");
  });
  return form;
}
