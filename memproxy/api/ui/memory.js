// One memory: its fields, an edit form (text, metadata, expiry), delete, and its history
// timeline -- old and new text side by side, with the captured turn (job) each extracted
// change came from. History outlives a deleted memory, so the page works for those too.

import { api } from "/ui/api.js";
import { confirmButton, facts, fill, h, json, link, scopeLabel, when } from "/ui/dom.js";

/** The metadata box's JSON object; undefined when empty. Throws with a readable message. */
export function parseMetadata(raw) {
  if (!raw.trim()) return undefined;
  let value;
  try {
    value = JSON.parse(raw);
  } catch {
    throw new Error("Metadata must be valid JSON.");
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error("Metadata must be a JSON object, such as {\"topic\": \"travel\"}.");
  }
  return value;
}

/** The expiry box's ISO-8601 time; null when empty. */
export function parseExpiry(raw) {
  const text = raw.trim();
  if (!text) return null;
  if (Number.isNaN(Date.parse(text))) throw new Error("Expires at must be an ISO-8601 time, such as 2030-01-01T00:00:00Z.");
  return text;
}

async function optional(promise) {
  try {
    return await promise;
  } catch (failure) {
    if (failure.status === 404) return null;
    throw failure;
  }
}

export async function memoryPage(view, params, ctx) {
  const id = params.get("id") || "";
  const path = `/v1/memories/${encodeURIComponent(id)}`;
  const [memory, history] = await Promise.all([optional(api("GET", path)), optional(api("GET", `${path}/history`))]);
  if (!memory && !history) {
    const missing = new Error("No such memory under this credential.");
    missing.status = 404;
    throw missing;
  }
  const scope = memory ? { user_id: memory.user_id, agent_id: memory.agent_id } : null;
  fill(view,
    h("p", { class: "crumbs" }, h("a", { href: link("scopes") }, "Scopes"), " / ",
      scope ? h("a", { href: link("scope", scope) }, scopeLabel(scope.user_id, scope.agent_id)) : "(deleted)",
      " / memory"),
    h("h1", {}, "Memory"),
    memory ? details(memory) : h("p", { class: "note" }, "This memory was deleted (or has expired); its history remains until its scope is forgotten."),
    memory ? editForm(memory, path, ctx) : null,
    memory ? h("p", {}, confirmButton("Delete this memory", "Really delete?", async () => {
      await api("DELETE", path);
      ctx.say("Memory deleted.");
      await ctx.refresh();
    })) : null,
    timeline(history ? history.data : []));
}

function details(m) {
  return h("section", { class: "card memory" },
    h("p", { class: "memory-text" }, m.text),
    facts([
      ["id", h("code", {}, m.id)],
      ["user", m.user_id || "—"],
      ["agent", m.agent_id || "—"],
      ["session", m.session_id || "—"],
      ["source", m.source],
      ["metadata", h("pre", {}, json(m.metadata))],
      ["created", when(m.created_at)],
      ["updated", when(m.updated_at)],
      ["expires", m.expires_at ? when(m.expires_at) : "never"],
    ]));
}

function editForm(m, path, ctx) {
  const text = h("textarea", { id: "edit-text", rows: 3, required: true });
  text.value = m.text;
  const metadata = h("textarea", { id: "edit-metadata", rows: 3, spellcheck: false });
  metadata.value = json(m.metadata);
  const expires = h("input", { id: "edit-expires", type: "text", spellcheck: false, placeholder: "empty: never" });
  expires.value = m.expires_at || "";
  const form = h("form", { class: "card" },
    h("h2", {}, "Edit"),
    h("label", { for: "edit-text" }, "Text"), text,
    h("label", { for: "edit-metadata" }, "Metadata (JSON object)"), metadata,
    h("label", { for: "edit-expires" }, "Expires at (ISO-8601; empty for never)"), expires,
    h("button", { type: "submit" }, "Save changes"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const patch = {};
      if (text.value.trim() !== m.text) patch.text = text.value;
      const meta = parseMetadata(metadata.value) ?? {};
      if (JSON.stringify(meta) !== JSON.stringify(m.metadata)) patch.metadata = meta;
      const expiry = parseExpiry(expires.value);
      if (expiry !== (m.expires_at || null)) patch.expires_at = expiry;
      if (!Object.keys(patch).length) return ctx.say("Nothing changed.");
      await api("PATCH", path, { body: patch });
      ctx.say("Saved.");
      await ctx.refresh();
    } catch (failure) {
      ctx.say(failure.message, "error");
    }
  });
  return form;
}

function timeline(events) {
  return h("section", { "aria-labelledby": "history-title" },
    h("h2", { id: "history-title" }, "History"),
    events.length ? h("ol", { class: "timeline" }, events.map((e) => h("li", { class: `event ${e.event.toLowerCase()}` },
      h("p", { class: "event-head" }, h("strong", {}, e.event), ` · ${when(e.created_at)} · ${e.source}`,
        e.job_ids && e.job_ids.length ? [" · from ",
          e.job_ids.map((jobId, i) => [i ? ", " : "", h("a", { href: link("job", { id: jobId }) }, `turn ${jobId}`)])] : null),
      h("div", { class: "diff" },
        h("div", { class: "old" }, h("span", { class: "label" }, "before"), h("p", {}, e.old_text ?? "—")),
        h("div", { class: "new" }, h("span", { class: "label" }, "after"), h("p", {}, e.new_text ?? "—"))))))
      : h("p", { class: "empty" }, "No history."));
}
