// The chat page of `rein serve --ui`: talks to the server's own API (GET v1/models, streamed POST
// v1/chat/completions, the ui/api/threads endpoints) with the key kept in sessionStorage.
// Everything the agent or a user wrote is put in the page as text, never as HTML.

import { describe, fromErrorBody, newThreadId, randomHex, request, setKey, sseEvents, threadHeader } from "./api.js";
import { TurnView, el } from "./turn_view.js";

const $ = (id) => document.getElementById(id);
const KEY_ITEM = "rein.api_key";

const state = {
  key: sessionStorage.getItem(KEY_ITEM) || "",
  agent: "",
  thread: "", // the current conversation's thread id; empty until its first message
  busy: false,
  meta: new Map(), // "agent\nthread\nturn" -> what the stream said about that turn (mode, termination…)
};
setKey(state.key);

function showBanner(message) {
  const banner = $("banner");
  banner.textContent = message || "";
  banner.hidden = !message;
}

// --- conversations ---------------------------------------------------------------------------

function metaKey(index) {
  return `${state.agent}\n${state.thread}\n${index}`;
}

function setThread(agent, thread) {
  state.agent = agent;
  state.thread = thread;
  $("agent").value = agent;
  $("thread-label").textContent = thread ? `thread ${thread}` : "new conversation";
  for (const li of $("threads").children) {
    li.classList.toggle("current", li.dataset.agent === agent && li.dataset.thread === thread);
  }
}

function userMessage(text) {
  return el("div", { class: "msg user", text });
}

// The thread as stored: user messages, then each turn's plants, tool traffic and answer.
function renderThread(messages, pending = []) {
  const log = $("log");
  log.replaceChildren();
  let turn = null;
  let index = -1;
  const finishTurn = () => {
    if (turn) turn.finish(state.meta.get(metaKey(turn.index)));
  };
  for (const m of messages) {
    if (m.role === "user") {
      finishTurn();
      turn = null;
      index += 1;
      log.append(userMessage(m.text));
      continue;
    }
    if (!turn) {
      turn = new TurnView(index);
      log.append(turn.node);
    }
    addStored(turn, m);
  }
  finishTurn();
  if (turn) {
    for (const { state: label, result } of turn.calls.values()) {
      if (result.hidden) label.textContent = "no result";
    }
    if (pending.length) {
      const paused = turn;
      paused.awaitApproval(pending, (decisions) => busyWith(() => decide(paused, decisions)));
    }
  }
  log.scrollTop = log.scrollHeight;
  return index;
}

function addStored(turn, m) {
  if (m.planted_by) {
    if (m.planted_reasoning) turn.plant(m.planted_by, m.planted_reasoning);
    else if (m.role === "assistant" && m.reasoning) turn.plant(m.planted_by, m.reasoning);
    else if (m.role === "assistant") {
      for (const c of m.tool_calls || []) turn.plant(m.planted_by, `${c.name}(${c.arguments})`, "rein fetched context");
    } else if (m.role === "tool" && m.text) turn.plant(m.planted_by, m.text, "context rein fetched");
    return;
  }
  if (m.role === "assistant") {
    if (m.reasoning) turn.appendReasoning(m.reasoning);
    if (m.text && m.text.trim()) {
      if (turn.answer.textContent) turn.appendAnswer("\n\n");
      turn.appendAnswer(m.text);
    }
    for (const c of m.tool_calls || []) turn.toolCall(c);
  } else if (m.role === "tool") {
    turn.toolResult(m.call_id, m.name, m.text, m.is_error);
  }
}

async function openThread(agent, thread) {
  setThread(agent, thread);
  showBanner("");
  try {
    const r = await request(`ui/api/threads/${encodeURIComponent(agent)}/${encodeURIComponent(thread)}`);
    const stored = await r.json();
    renderThread(stored.messages, stored.pending || []);
  } catch (err) {
    showBanner(describe(err));
  }
}

async function refreshThreads() {
  let items;
  try {
    items = (await (await request("ui/api/threads")).json()).data;
  } catch (err) {
    showBanner(`cannot list conversations: ${describe(err)}`);
    return;
  }
  const list = $("threads");
  list.replaceChildren(...items.map((t) => {
    const when = t.updated_at ? new Date(t.updated_at * 1000).toLocaleString() : "";
    const button = el("button", { type: "button" }, el("span", { text: t.thread_id }),
      el("span", { class: "when", text: `${t.agent}${when ? ` · ${when}` : ""}` }));
    button.addEventListener("click", () => openThread(t.agent, t.thread_id));
    const li = el("li", {}, button);
    li.dataset.agent = t.agent;
    li.dataset.thread = t.thread_id;
    li.classList.toggle("current", t.agent === state.agent && t.thread_id === state.thread);
    return li;
  }));
}

function newConversation() {
  setThread($("agent").value, "");
  $("log").replaceChildren();
  showBanner("");
  $("input").focus();
}

// --- a streamed turn -------------------------------------------------------------------------

// --- a streamed turn -------------------------------------------------------------------------

function onEvent(turn, event) {
  if (event.type === "mode") turn.mode(event.mode, event.reason);
  else if (event.type === "intervention") {
    const text = event.record && event.record.text;
    if (event.activated && text) turn.plant(event.name, text);
    else turn.badge(`rein · ${event.name}: nothing planted`).dataset.rein = event.name;
  } else if (event.type === "guardrail") {
    turn.badge(`guardrail · ${event.name}: ${event.action}${event.reason ? ` (${event.reason})` : ""}`);
  } else if (event.type === "tool_call") {
    turn.toolCall({ id: event.call_id, name: event.name, arguments: event.arguments });
  } else if (event.type === "tool_result") {
    turn.toolResult(event.call_id, event.name, event.content, event.is_error);
  }
}

// Streams one request's answer into a turn's view; the metadata of its last chunk, or null when it
// failed (the error is shown in the turn).
async function streamInto(turn, agent, thread, messages) {
  const meta = {};
  turn.node.classList.add("streaming");
  turn.status.textContent = "waiting for the agent…";
  try {
    const response = await request("v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Rein-Thread": threadHeader(thread), "Idempotency-Key": randomHex(16) },
      body: JSON.stringify({ model: agent, stream: true, messages }),
    });
    turn.status.textContent = "answering…";
    let separate = Boolean(turn.answer.textContent); // a resumed turn goes on after what it said
    for await (const chunk of sseEvents(response)) {
      const failed = fromErrorBody(chunk);
      if (failed) throw failed;
      const choice = (chunk.choices || [])[0];
      const delta = (choice && choice.delta) || {};
      if (delta.content) {
        turn.appendAnswer(separate ? `\n\n${delta.content}` : delta.content);
        separate = false;
      }
      if (delta.reasoning_content) turn.appendReasoning(delta.reasoning_content);
      const rein = chunk.rein;
      if (rein && rein.event) {
        if (rein.event.type === "mode") meta.modeReason = rein.event.reason;
        onEvent(turn, rein.event);
      } else if (rein && rein.thread_id) {
        Object.assign(meta, rein);
      }
      $("log").scrollTop = $("log").scrollHeight;
    }
  } catch (err) {
    turn.status.textContent = "";
    turn.node.classList.remove("streaming");
    turn.error(describe(err));
    if (err.status === 401) showKey(err.message);
    return null;
  }
  turn.node.classList.remove("streaming");
  return meta;
}

async function send(text) {
  const agent = $("agent").value;
  if (!state.thread || agent !== state.agent) setThread(agent, newThreadId(text));
  const log = $("log");
  const index = log.querySelectorAll(".msg.user").length;
  log.append(userMessage(text));
  const turn = new TurnView(index);
  log.append(turn.node);
  const meta = await streamInto(turn, agent, state.thread, [{ role: "user", content: text }]);
  await settle(agent, meta, index);
}

// Answers every call a paused turn waits on, at once (the server resumes a turn once), and streams
// what the agent does next into the same turn.
async function decide(turn, decisions) {
  const agent = state.agent;
  const messages = decisions.map((d) => ({
    role: "tool", tool_call_id: d.id,
    content: JSON.stringify(d.approved ? { approved: true } : { approved: false, reason: d.reason || "rejected in the browser UI" }),
  }));
  const meta = await streamInto(turn, agent, state.thread, messages);
  const earlier = state.meta.get(metaKey(turn.index)) || {};
  const merged = meta && {
    ...earlier, ...meta, mode: meta.mode || earlier.mode,
    interventions: [...(earlier.interventions || []), ...(meta.interventions || [])],
  };
  await settle(agent, merged, turn.index);
}

async function settle(agent, meta, index) {
  if (meta) {
    if (meta.thread_id) setThread(agent, meta.thread_id); // a fork, when the conversation moved to one
    state.meta.set(metaKey(index), meta);
    // The stream carries the answer; the thread holds its tool calls and results too.
    await openThread(agent, state.thread);
  }
  await refreshThreads(); // a failed turn's thread holds its user message
}

// One request at a time: a turn, or the decisions that resume one.
async function busyWith(work) {
  state.busy = true;
  document.body.dataset.busy = "true"; // also read by the browser test
  $("send").disabled = true;
  try {
    await work();
  } finally {
    state.busy = false;
    document.body.dataset.busy = "false";
    $("send").disabled = false;
    $("input").focus();
  }
}

// --- start-up --------------------------------------------------------------------------------

function showKey(message) {
  $("key-error").textContent = message || "";
  $("key-error").hidden = !message;
  $("key").value = state.key;
  if (!$("key-dialog").open) $("key-dialog").showModal();
  $("key").focus();
}

async function connect() {
  let models;
  try {
    models = (await (await request("v1/models")).json()).data;
  } catch (err) {
    if (err.status === 401) showKey(state.key ? err.message : "");
    else showBanner(describe(err));
    return;
  }
  if ($("key-dialog").open) $("key-dialog").close();
  showBanner("");
  const select = $("agent");
  const chosen = select.value;
  select.replaceChildren(...models.map((m) => el("option", { value: m.id, text: m.id })));
  if (models.some((m) => m.id === chosen)) select.value = chosen;
  setThread(select.value, state.thread);
  await refreshThreads();
  document.body.dataset.ready = "true";
}

function start() {
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.key = $("key").value.trim();
    setKey(state.key);
    sessionStorage.setItem(KEY_ITEM, state.key);
    connect();
  });
  $("change-key").addEventListener("click", () => showKey(""));
  $("new-chat").addEventListener("click", newConversation);
  $("agent").addEventListener("change", newConversation);
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if (!text || state.busy) return;
    $("input").value = "";
    busyWith(() => send(text));
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  connect();
}

start();
