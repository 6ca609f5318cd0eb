// One assistant turn on the page, and the element helper the page builds everything with. Text the
// agent or a user wrote goes in as text (textContent), never as HTML.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

// One assistant turn on the page: badges (mode, rein's activity), planted reasoning, the model's
// reasoning, the answer, its tool calls and results folded under it, approvals, errors, a status line.
export class TurnView {
  constructor(index) {
    this.index = index;
    this.badges = el("div", { class: "badges" });
    this.plants = el("div", { class: "plants" });
    this.reasoningText = el("pre");
    this.reasoning = el("details", { class: "reasoning", hidden: "" }, el("summary", { text: "Model reasoning" }), this.reasoningText);
    this.answer = el("div", { class: "answer" });
    this.toolList = el("ol");
    this.toolSummary = el("summary");
    this.tools = el("details", { class: "tools", hidden: "" }, this.toolSummary, this.toolList);
    this.approvals = el("div", { class: "approvals" });
    this.errors = el("div", { class: "errors" });
    this.status = el("div", { class: "status" });
    this.node = el("article", { class: "msg assistant", "data-turn": String(index) },
      this.badges, this.plants, this.reasoning, this.answer, this.tools, this.approvals, this.errors, this.status);
    this.calls = new Map();
  }

  appendAnswer(text) {
    this.answer.textContent += text;
  }

  appendReasoning(text) {
    this.reasoning.hidden = false;
    this.reasoningText.textContent += text;
  }

  badge(text, kind = "") {
    const node = el("span", { class: `badge ${kind}`.trim(), text });
    this.badges.append(node);
    return node;
  }

  mode(mode, reason) {
    if (this.badges.querySelector(".badge.mode")) return;
    this.badge(reason ? `mode: ${mode} (${reason})` : `mode: ${mode}`, "mode");
  }

  // Reasoning rein planted into the agent's context: shown as such, apart from the model's own.
  plant(by, text, label = "rein planted reasoning") {
    this.plants.append(el("aside", { class: "plant" },
      el("div", { class: "label", text: `${label} · ${by}` }), el("div", { class: "text", text })));
  }

  toolCall(call) {
    const result = el("pre", { class: "result", hidden: "" });
    const state = el("span", { class: "state", text: "running" });
    const item = el("li", { class: "tool", "data-call-id": call.id },
      el("span", { class: "name", text: call.name }), state, el("pre", { class: "args", text: call.arguments }), result);
    this.calls.set(call.id, { item, result, state });
    this.toolList.append(item);
    this.tools.hidden = false;
    const n = this.calls.size;
    this.toolSummary.textContent = `${n} tool call${n === 1 ? "" : "s"}`;
    return this.calls.get(call.id);
  }

  toolResult(callId, name, text, isError) {
    const found = this.calls.get(callId) || this.toolCall({ id: callId, name: name || "tool", arguments: "" });
    found.result.hidden = false;
    found.result.textContent = text;
    found.result.classList.toggle("is-error", Boolean(isError));
    found.state.textContent = isError ? "error" : "done";
  }

  // The calls a paused turn waits on: each gets Approve and Reject; once every one has a decision
  // they go to the server together.
  awaitApproval(pending, onDecided) {
    const decisions = new Map();
    for (const call of pending) {
      const found = this.calls.get(call.id) || this.toolCall(call);
      found.state.textContent = "awaiting approval";
      const reason = el("input", { type: "text", class: "reason", placeholder: "reason (optional)", "aria-label": "Reason for rejecting" });
      const approve = el("button", { type: "button", class: "approve", text: "Approve" });
      const reject = el("button", { type: "button", class: "reject", text: "Reject" });
      const box = el("div", { class: "approval", "data-call-id": call.id },
        el("div", { text: `Approval needed: ${call.name}(${call.arguments})` }),
        call.reason ? el("div", { class: "muted", text: call.reason }) : null,
        el("div", { class: "buttons" }, approve, reject, reason));
      const choose = (approved) => {
        decisions.set(call.id, { id: call.id, approved, reason: reason.value.trim() });
        for (const b of [approve, reject, reason]) b.disabled = true;
        box.append(el("div", { class: "decided", text: approved ? "approved" : "rejected" }));
        if (decisions.size === pending.length) onDecided([...decisions.values()]);
      };
      approve.addEventListener("click", () => choose(true));
      reject.addEventListener("click", () => choose(false));
      this.approvals.append(box);
    }
    this.tools.open = true; // what waits on the user is not folded away
  }

  error(message) {
    this.errors.append(el("div", { class: "error", role: "alert", text: message }));
  }

  finish(meta) {
    if (!meta) return;
    if (meta.mode) this.mode(meta.mode, meta.modeReason);
    for (const i of meta.interventions || []) {
      if (!i.activated && !this.badges.querySelector(`[data-rein="${CSS.escape(i.name)}"]`)) {
        this.badge(`rein · ${i.name}: nothing planted`).dataset.rein = i.name;
      }
    }
    const parts = [];
    if (meta.termination) parts.push(meta.termination);
    if (meta.usage) parts.push(`${meta.usage.input_tokens} in / ${meta.usage.output_tokens} out tokens`);
    if (meta.action && meta.action !== "append") parts.push(meta.action);
    this.status.textContent = parts.join(" · ");
    if (meta.error && meta.termination !== "agent_stop") this.error(`the turn ended with ${meta.termination}: ${meta.error}`);
  }
}

