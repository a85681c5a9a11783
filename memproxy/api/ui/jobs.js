// Jobs: the extraction outbox by status, newest first (attempts, last error, tokens, timing), retrying
// dead jobs, and one job's captured messages -- the turn a memory was extracted from.

import { api } from "/ui/api.js";
import { facts, fill, h, json, link, pagerNav, scopeLabel, when } from "/ui/dom.js";

const STATUSES = ["pending", "running", "done", "dead"];
const PAGE = 50;

function seconds(from, to) {
  if (!from || !to) return "";
  const s = (Date.parse(to) - Date.parse(from)) / 1000;
  return s >= 0 ? `${s.toFixed(1)} s` : "";
}

/**
 * The tab Jobs opens on when the link names none: "dead" when there are dead jobs (they are
 * what needs a human), else "all" -- so a newcomer sees their jobs, not "No dead jobs."
 */
async function openingTab(ids) {
  const dead = await api("GET", "/v1/jobs", { query: { status: "dead", limit: 1, ...ids } });
  return dead.data.length ? "dead" : "all";
}

export async function jobsPage(view, params, ctx) {
  const ids = {};
  if (params.has("user_id")) ids.user_id = params.get("user_id");
  if (params.has("agent_id")) ids.agent_id = params.get("agent_id");
  const status = params.get("status") || await openingTab(ids);
  const cursor = params.get("cursor") || "";
  const trail = (params.get("trail") || "").split(",").filter(Boolean);
  const page = await api("GET", "/v1/jobs", {
    query: { status: status === "all" ? undefined : status, limit: PAGE, cursor: cursor || undefined, order: "desc",
      ...ids } });
  const scoped = "user_id" in ids || "agent_id" in ids;

  const tabs = h("nav", { class: "tabs", "aria-label": "Job status" }, [...STATUSES, "all"].map((s) =>
    h("a", { href: link("jobs", { ...ids, status: s }), "aria-current": s === status ? "page" : undefined }, s)));
  const rows = page.data.map((job) => h("tr", {},
    h("td", {}, h("a", { href: link("job", { id: job.id }) }, h("code", { class: "id" }, job.id))),
    scoped ? null : h("td", {}, h("a", { href: link("scope", { user_id: job.user_id, agent_id: job.agent_id }) },
      scopeLabel(job.user_id, job.agent_id))),
    h("td", {}, job.status),
    h("td", { class: "num" }, job.attempts),
    h("td", { class: "error-text" }, job.last_error || ""),
    h("td", { class: "num" }, `${job.usage.prompt_tokens} / ${job.usage.completion_tokens}`),
    h("td", {}, when(job.created_at)),
    h("td", {}, job.status === "done" ? seconds(job.created_at, job.updated_at)
      : job.next_attempt_at ? `next try ${when(job.next_attempt_at)}` : when(job.updated_at)),
    h("td", {}, job.status === "dead" ? retryButton(job, ctx) : null)));

  fill(view,
    h("h1", {}, scoped ? `Jobs of ${scopeLabel(ids.user_id, ids.agent_id)}` : "Jobs"),
    scoped ? h("p", { class: "crumbs" }, h("a", { href: link("scope", { user_id: ids.user_id ?? "", agent_id: ids.agent_id ?? "" }) },
      "Back to the scope"), " · ", h("a", { href: link("jobs", { status }) }, "all scopes")) : null,
    tabs,
    rows.length ? h("table", {},
      h("caption", { class: "sr-only" }, `${status} jobs`),
      h("thead", {}, h("tr", {}, ["Job", scoped ? null : "Scope", "Status", "Attempts", "Last error",
        "Tokens in / out", "Captured", "Took / next", ""].filter((t) => t !== null)
        .map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows)) : h("p", { class: "empty" }, `No ${status === "all" ? "" : status + " "}jobs.`),
    pagerNav("jobs", { ...ids, status }, cursor, trail, page.next_cursor));
}

function retryButton(job, ctx) {
  const button = h("button", { type: "button" }, "Retry");
  button.setAttribute("aria-label", `Retry job ${job.id}`);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const again = await api("POST", `/v1/jobs/${encodeURIComponent(job.id)}/retry`);
      ctx.say(`Job ${job.id} is ${again.status} again.`);
      await ctx.refresh();
    } catch (failure) {
      button.disabled = false;
      ctx.say(failure.message, "error");
    }
  });
  return button;
}

export async function jobPage(view, params, ctx) {
  const id = params.get("id") || "";
  const path = `/v1/jobs/${encodeURIComponent(id)}`;
  const [job, messages] = await Promise.all([api("GET", path), api("GET", `${path}/messages`)]);
  const scope = { user_id: job.user_id, agent_id: job.agent_id };
  fill(view,
    h("p", { class: "crumbs" }, h("a", { href: link("jobs", { status: job.status }) }, "Jobs"), " / ",
      h("a", { href: link("scope", scope) }, scopeLabel(job.user_id, job.agent_id))),
    h("h1", {}, `Job ${job.id}`),
    facts([
      ["status", job.status],
      ["attempts", `${job.attempts}`],
      ["last error", job.last_error ? h("span", { class: "error-text" }, job.last_error) : "—"],
      ["tokens", `${job.usage.prompt_tokens} prompt / ${job.usage.completion_tokens} completion`],
      ["session", job.session_id || "—"],
      ["captured", when(job.created_at)],
      ["updated", when(job.updated_at)],
      ["next attempt", when(job.next_attempt_at) || "—"],
    ]),
    job.status === "dead" ? h("p", {}, retryButton(job, ctx)) : null,
    h("h2", {}, "What the extraction did"),
    reportSection(job),
    h("h2", {}, "Captured messages"),
    messages.data.length ? h("ol", { class: "messages" }, messages.data.map((m) => h("li", { class: `message ${m.role}` },
      h("p", { class: "role" }, m.role),
      h("p", { class: "content" }, typeof m.message.content === "string" ? m.message.content : json(m.message.content)),
      m.message.tool_calls ? h("pre", {}, json(m.message.tool_calls)) : null)))
      : h("p", { class: "empty" }, "No captured messages."));
}

// memory.guards.REASONS in words; an unknown reason is shown as it is.
const REASON_WORDS = {
  secret: "it looks like a secret", too_long: "too long", question: "a question, not a fact",
  placeholder: "a placeholder, not a fact", prompt_example: "copied from the prompt's examples",
  duplicate: "already stored", collision: "the same as an existing memory", invalid: "malformed",
  missing: "names no memory it was shown",
};

/** The job's report (GET /v1/jobs/{id} `report`): counts applied, and each refused operation with why. */
function reportSection(job) {
  const report = job.report;
  if (!report) {
    return h("p", { class: "empty", id: "job-report" }, job.status === "done"
      ? "No report was kept for this job."
      : "Not extracted yet: the report appears once the job is done.");
  }
  const applied = report.applied || {};
  const count = (op, word) => `${applied[op] || 0} ${word}`;
  const rejected = report.rejected || [];
  return h("section", { id: "job-report", "aria-label": "Extraction report" },
    h("p", { class: "report-applied" },
      `${count("ADD", "added")}, ${count("UPDATE", "updated")}, ${count("DELETE", "deleted")}, ${rejected.length} refused.`),
    report.empty_answer
      ? h("p", { class: "note" }, "The model proposed nothing although the turn seems to state facts about the user.")
      : null,
    rejected.length ? h("ul", { class: "report", "aria-label": "Refused operations" }, rejected.map((r) => h("li", {},
      h("strong", {}, r.op), r.id ? [" ", h("code", {}, r.id)] : null,
      ` refused: ${REASON_WORDS[r.reason] || r.reason}`, r.detail ? ` (${r.detail})` : null))) : null);
}
