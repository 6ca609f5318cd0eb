// The official openai npm SDK calling rein serve as a page on ORIGIN would: every request first
// goes through a CORS preflight and is refused, as a browser refuses it, unless the server allows
// the origin, the method and every header the SDK sets. Node itself enforces no CORS, so this
// fetch does the browser's part.
// Usage: node call.mjs BASE_URL API_KEY ORIGIN MODEL
import OpenAI from "openai";

const [baseURL, apiKey, origin, model] = process.argv.slice(2);
// Headers a page may send without asking (the CORS-safelisted ones); User-Agent is set by the
// browser, never by the SDK when it runs in one.
const SAFELISTED = new Set(["accept", "accept-language", "content-language", "user-agent"]);
const preflights = [];

async function browserFetch(url, init = {}) {
  const headers = new Headers(init.headers);
  const asked = [...headers.keys()].filter((h) => !SAFELISTED.has(h)).sort();
  const pre = await fetch(url, {
    method: "OPTIONS",
    headers: {
      Origin: origin,
      "Access-Control-Request-Method": init.method ?? "GET",
      "Access-Control-Request-Headers": asked.join(","),
    },
  });
  const allowed = (pre.headers.get("access-control-allow-headers") ?? "").toLowerCase().split(",").map((h) => h.trim());
  const allowOrigin = pre.headers.get("access-control-allow-origin");
  preflights.push({ status: pre.status, asked, refused: asked.filter((h) => !allowed.includes(h) && !allowed.includes("*")) });
  if (pre.status !== 200 || (allowOrigin !== origin && allowOrigin !== "*") || preflights.at(-1).refused.length) {
    throw new TypeError(`CORS preflight refused (${pre.status}): ${await pre.text()}`);
  }
  headers.set("Origin", origin);
  const response = await fetch(url, { ...init, headers });
  const responseOrigin = response.headers.get("access-control-allow-origin");
  if (responseOrigin !== origin && responseOrigin !== "*") {
    throw new TypeError("CORS: the response does not allow this origin");
  }
  return response;
}

const client = new OpenAI({ baseURL, apiKey, fetch: browserFetch, maxRetries: 0, organization: "org-1", project: "proj-1" });
const result = { preflights };
try {
  const { data, response } = await client.chat.completions
    .create({ model, messages: [{ role: "user", content: "hi from a page" }] }, { headers: { "X-Rein-Thread": "page-1" } })
    .withResponse();
  result.reply = data.choices[0].message.content;
  result.thread = response.headers.get("x-rein-thread");
  const stream = await client.chat.completions.create({ model, messages: [{ role: "user", content: "again" }], stream: true },
    { headers: { "X-Rein-Thread": "page-1", "Idempotency-Key": "k-2" } });
  let streamed = "";
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
  result.streamed = streamed;
} catch (err) {
  result.error = String(err?.message ?? err);
}
console.log(JSON.stringify(result));
