// DOM helpers. Every piece of data reaches the page as a text node or a property value:
// nothing here (nor anywhere in the console) assigns innerHTML, so memory text, metadata
// and ids -- which come from users' chats -- can never become markup.

/** Build an element: h("a", {href: "#/x", class: "btn"}, "text", child, ...). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      el.className = value;
    } else if (name in el && typeof value !== "string") {
      el[name] = value; // properties such as disabled, checked, value
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A hash link to a console page: route plus query parameters, all URI-encoded. */
export function link(route, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) query.set(k, v);
  const qs = query.toString();
  return `#/${route}${qs ? "?" + qs : ""}`;
}

/** "2026-01-02T03:04:05.123456Z" -> "2026-01-02 03:04:05 UTC"; "" for null. */
export function when(iso) {
  if (!iso) return "";
  return iso.replace("T", " ").replace(/\.\d+Z$|Z$/, "") + " UTC";
}

export function scopeLabel(userId, agentId) {
  const parts = [];
  if (userId) parts.push(`user ${userId}`);
  if (agentId) parts.push(`agent ${agentId}`);
  return parts.join(" · ") || "(no user, no agent)";
}

/** Pretty JSON as text (a <pre> shows it). */
export function json(value) {
  return JSON.stringify(value, null, 2);
}

/** A definition list from [label, value] pairs; values are text or nodes. */
export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

/** A button that asks "Sure?" in place (no window.confirm) before running `action`. */
export function confirmButton(label, confirmLabel, action, attrs = {}) {
  const button = h("button", { type: "button", class: "danger", ...attrs }, label);
  let armed = false;
  button.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      button.textContent = confirmLabel;
      setTimeout(() => { armed = false; button.textContent = label; }, 5000);
      return;
    }
    button.disabled = true;
    try { await action(); } finally { button.disabled = false; }
  });
  return button;
}

/**
 * Previous/Next links for a cursor-paged list. `trail` holds the cursors of the pages before
 * this one ("-" for the first page), kept in the fragment so "Previous" can go back.
 */
export function pagerNav(route, params, cursor, trail, nextCursor) {
  const previous = trail.at(-1);
  return h("nav", { class: "pager", "aria-label": "Pages" },
    previous ? h("a", { href: link(route, { ...params, cursor: previous === "-" ? undefined : previous,
      trail: trail.slice(0, -1).join(",") || undefined }) }, "← Previous page") : null,
    nextCursor ? h("a", { href: link(route, { ...params, cursor: nextCursor,
      trail: [...trail, cursor || "-"].join(",") }) }, "Next page →") : null);
}
