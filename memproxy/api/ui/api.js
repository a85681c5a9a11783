// The management API, called with the signed-in credential as a Bearer header.
// The credential lives only in this tab's sessionStorage: never a cookie (so no other site
// can ride on it), never a URL (so it is in no history, log or Referer).

const KEY = "memproxy.credential";

export function credential() {
  return sessionStorage.getItem(KEY);
}

export function remember(token) {
  sessionStorage.setItem(KEY, token);
}

export function forget() {
  sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let onUnauthorized = () => {};
export function whenUnauthorized(fn) {
  onUnauthorized = fn;
}

/** Call the API; JSON in and out unless `raw` (then the Response) or `text` (a string body). */
export async function api(method, path, { query, body, text, raw, token } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null) url.searchParams.set(k, v);
  }
  const headers = { Authorization: `Bearer ${token ?? credential() ?? ""}` };
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  } else if (text !== undefined) {
    headers["Content-Type"] = "application/x-ndjson";
    payload = text;
  }
  const response = await fetch(url, {
    method, headers, body: payload, credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer",
  });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      message = (await response.json()).error.message || message;
    } catch { /* not our JSON error shape */ }
    if (response.status === 401 && token === undefined) onUnauthorized(message);
    throw new ApiError(response.status, message);
  }
  if (raw) return response;
  return response.json();
}
