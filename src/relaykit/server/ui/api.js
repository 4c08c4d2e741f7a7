// The HTTP API (docs/http-server.md) as the UI uses it: JSON calls, and turns read as
// server-sent events from a fetch body (EventSource cannot POST or send a header).

const KEY_STORAGE = "relaykit.apiKey";
// The API is served by the same app, one level above /ui/ (also behind a path prefix).
const BASE = new URL("../", document.baseURI);

/** An error response of the API: {"error": {"type", "message"}} and its status. */
export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || "";
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

function headers(withBody, accept = "application/json") {
  const out = { Accept: accept };
  if (withBody) out["Content-Type"] = "application/json";
  const key = apiKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

async function failure(response) {
  let type = "http_error";
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      type = body.error.type;
      message = body.error.message;
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, type, message);
}

async function call(method, path, body) {
  const init = { method, headers: headers(body !== undefined) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(new URL(path, BASE), init);
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : response.json();
}

const sessionPath = (id) => `sessions/${encodeURIComponent(id)}`;

export const api = {
  health: () => call("GET", "health"),
  agent: () => call("GET", "agent"),
  listSessions: () => call("GET", "sessions"),
  createSession: (body) => call("POST", "sessions", body),
  getSession: (id) => call("GET", sessionPath(id)),
  deleteSession: (id) => call("DELETE", sessionPath(id)),
  /** A turn (text or messages) as an async iterator of {event, data}. */
  turn: (id, body) => stream(`${sessionPath(id)}/turns`, body),
  /** A resume of the session's pause, as turn. */
  resume: (id, body) => stream(`${sessionPath(id)}/resume`, body),
  /** Stop the session's running turn at a safe point (its pause then waits for a resume). */
  cancel: (id, body) => call("POST", `${sessionPath(id)}/cancel`, body),
};

async function* stream(path, body) {
  const response = await fetch(new URL(path, BASE), {
    method: "POST",
    headers: headers(true, "text/event-stream"),
    body: JSON.stringify({ ...body, stream: true }),
  });
  if (!response.ok) throw await failure(response);
  yield* readEvents(response.body);
}

const BLANK_LINE = /\r\n\r\n|\n\n|\r\r/;

/** The server-sent events of a byte stream: {event, data} with data parsed as JSON. */
export async function* readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      // An event ends at a blank line (LF, CRLF or CR line ends).
      let end;
      while ((end = BLANK_LINE.exec(buffer))) {
        const parsed = parseBlock(buffer.slice(0, end.index));
        buffer = buffer.slice(end.index + end[0].length);
        if (parsed) yield parsed;
      }
    }
    // What is left had no blank line after it: an event cut off when the connection dropped.
    // Server-sent events drop it (its data may be half a JSON text).
  } finally {
    reader.cancel().catch(() => {}); // a reader that stopped early closes the connection
  }
}

function parseBlock(block) {
  let event = "message";
  const data = [];
  for (const line of block.split(/\r\n|\r|\n/)) {
    if (!line || line.startsWith(":")) continue; // a comment: the server's keepalive
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  return data.length ? { event, data: JSON.parse(data.join("\n")) } : null;
}
