// The server's API as the page uses it: requests with the key, errors in OpenAI's shape, thread
// headers, and server-sent events.

let apiKey = "";

export function setKey(key) {
  apiKey = key;
}

export class ApiError extends Error {
  constructor(message, status = 0, code = null) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function headers(extra = {}) {
  const h = { ...extra };
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

export async function request(path, init = {}) {
  let response;
  try {
    response = await fetch(path, { ...init, headers: headers(init.headers) });
  } catch (err) {
    throw new ApiError(`cannot reach the server: ${err.message}`);
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

export async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status line says enough
  }
  return fromErrorBody(body, response.status) ||
    new ApiError(`HTTP ${response.status} ${response.statusText}`.trim(), response.status);
}

export function fromErrorBody(body, status = 0) {
  const e = body && body.error;
  if (!e || typeof e.message !== "string") return null;
  return new ApiError(e.message, e.status || status, e.code || null);
}

export function describe(err) {
  const where = err.status ? `${err.status}${err.code ? ` ${err.code}` : ""}: ` : "";
  return `${where}${err.message}`;
}

// X-Rein-Thread carries any id as printable ASCII (RFC 8187's form otherwise), as the server reads it.
export function threadHeader(id) {
  const plain = /^[\x20-\x7e]*$/.test(id) && !id.toLowerCase().startsWith("utf-8''");
  return plain ? id : `utf-8''${encodeURIComponent(id)}`;
}

export function randomHex(bytes) {
  // crypto.randomUUID needs a secure context; a page served over plain http on a LAN is not one.
  const a = crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function newThreadId(firstMessage) {
  const words = firstMessage.toLowerCase().match(/[a-z0-9]+/g) || [];
  const slug = words.slice(0, 6).join("-").slice(0, 48);
  return `ui-${slug ? `${slug}-` : ""}${randomHex(3)}`;
}

export async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data === "[DONE]") return;
      if (data) yield JSON.parse(data);
    }
    if (done) return;
  }
}
