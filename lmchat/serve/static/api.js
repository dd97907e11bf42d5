// The page's only way to the server: the public HTTP API (docs/server.md), with the key the user gave.

const KEY = "lmchat.key";

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || null;
    this.param = error.param || null;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY);
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

function headers(json) {
  const h = {};
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

export async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// Every page of a list (`after` the last id), oldest first where the route orders.
export async function all(path) {
  const found = [];
  let after = null;
  for (;;) {
    const sep = path.includes("?") ? "&" : "?";
    const page = await call("GET", `${path}${sep}limit=100${after ? `&after=${encodeURIComponent(after)}` : ""}`);
    found.push(...page.data);
    if (!page.has_more || !page.last_id) return found;
    after = page.last_id;
  }
}

// POST /v1/responses with stream: true; `on(event)` gets each event's data. Aborting `signal` closes the
// connection: the server cancels the turn and keeps the partial answer.
export async function stream(body, on, signal) {
  const response = await fetch("/v1/responses", {
    method: "POST", headers: headers(true), body: JSON.stringify({ ...body, stream: true }), signal,
  });
  if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
      if (data) on(JSON.parse(data));
    }
  }
}
