// The official openai npm SDK through rein's approval round trip: a turn pauses on a tool that
// needs approval (finish_reason "tool_calls"), and tool messages holding decisions resume it.
// Usage: node round_trip.mjs BASE_URL API_KEY (the server serves the test's "clerk" agent).
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const model = "clerk";
const out = {};

// Plain, with the whole history: send the assistant message back, then one decision per call.
const messages = [{ role: "user", content: "cancel L-1" }];
const paused = await client.chat.completions.create({ model, messages });
const choice = paused.choices[0];
out.paused = {
  finish_reason: choice.finish_reason,
  content: choice.message.content,
  tool_calls: choice.message.tool_calls.map((tc) => [tc.id, tc.function.name, tc.function.arguments]),
  pending: paused.rein.approval.pending.map((call) => call.id),
};
messages.push(choice.message);
for (const tc of choice.message.tool_calls) {
  messages.push({ role: "tool", tool_call_id: tc.id, content: JSON.stringify({ approved: true }) });
}
const approved = await client.chat.completions.create({ model, messages });
out.approved = {
  finish_reason: approved.choices[0].finish_reason,
  content: approved.choices[0].message.content,
  action: approved.rein.action,
};

// Streamed, on a named thread: the paused calls come whole in the last delta's tool_calls.
const thread = { headers: { "X-Rein-Thread": "js-stream" } };
const stream = await client.chat.completions.create(
  { model, messages: [{ role: "user", content: "cancel M-2" }], stream: true }, thread);
let text = "";
let finish = null;
const ids = [];
for await (const chunk of stream) {
  for (const c of chunk.choices) {
    text += c.delta.content ?? "";
    for (const tc of c.delta.tool_calls ?? []) ids.push(tc.id);
    finish = c.finish_reason ?? finish;
  }
}
out.streamed_pause = { text, finish_reason: finish, ids };
const decisions = ids.map((id) => ({
  role: "tool", tool_call_id: id, content: JSON.stringify({ approved: false, reason: "not today" }),
}));
const rejected = await client.chat.completions.create({ model, messages: decisions }, thread);
out.rejected = rejected.choices[0].message.content;

console.log(JSON.stringify(out));
