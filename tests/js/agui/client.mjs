// Drives rein's AG-UI endpoint with the official @ag-ui/client: HttpAgent runs (which verify the
// event order and apply the events to the agent's messages and state), over several runs of one
// thread, a tool-using agent, a planted reasoning message and an approval interrupt answered with
// `resume`. Usage: node client.mjs BASE_URL API_KEY; prints one JSON object.
import { randomUUID } from "node:crypto";
import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const [baseUrl, key] = process.argv.slice(2);

function agent(name) {
  return new HttpAgent({
    url: `${baseUrl}/v1/agui/${name}`,
    headers: { Authorization: `Bearer ${key}` },
    threadId: `js-${randomUUID()}`,
  });
}

async function run(agent, text, params = {}) {
  if (text !== undefined) agent.addMessage({ id: randomUUID(), role: "user", content: text });
  const events = [];
  let finished;
  const { newMessages } = await agent.runAgent(params, {
    onEvent: ({ event }) => { events.push(event); },
    onRunFinishedEvent: (params) => { finished = params; },
  });
  const texts = newMessages.filter((m) => m.role === "assistant" && m.content).map((m) => m.content);
  return { events, newMessages, texts, finished };
}

const types = (events) => events.map((e) => e.type);

const out = {};

const chat = agent("bot");
const first = await run(chat, "hello");
out.first = { text: first.texts.at(-1), types: types(first.events), state: chat.state };
const second = await run(chat, "again");
out.second = { text: second.texts.at(-1), sentMessages: chat.messages.length };

const calc = agent("bot");
const tools = await run(calc, "add please");
const results = Object.fromEntries(calc.messages.filter((m) => m.role === "tool").map((m) => [m.toolCallId, m.content]));
out.tools = {
  texts: tools.texts,
  toolCalls: calc.messages.flatMap((m) => m.toolCalls ?? []).map((c) => ({
    name: c.function.name, arguments: JSON.parse(c.function.arguments), result: results[c.id],
  })),
};
// The next run resends the history the client built from those events (tool messages included).
const after = await run(calc, "thanks");
out.tools.after = { text: after.texts.at(-1), forkedFrom: calc.state.forked_from };

const coach = agent("coach");
await run(coach, "hi");
const planted = await run(coach, "more");
out.plant = {
  reasoning: planted.newMessages.filter((m) => m.role === "reasoning").map((m) => m.content),
  custom: planted.events.filter((e) => e.type === "CUSTOM").map((e) => e.name),
};

const clerk = agent("clerk");
const paused = await run(clerk, "refund A-1");
const interrupts = clerk.pendingInterrupts.map((i) => ({ id: i.id, reason: i.reason, toolCallId: i.toolCallId }));
const answers = Object.fromEntries(clerk.pendingInterrupts.map((i) => [i.id, { status: "resolved", payload: { approved: true } }]));
const resumed = await run(clerk, undefined, { resume: buildResumeArray(clerk.pendingInterrupts, answers) });
out.approval = {
  outcome: paused.finished?.outcome,
  interrupts,
  resumedText: resumed.texts.at(-1),
  pendingAfter: clerk.pendingInterrupts.length,
};

console.log(JSON.stringify(out));
