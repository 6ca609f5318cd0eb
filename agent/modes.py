"""The three modes as distinct paths through the model node, and their step caps.

instant answers in one call without tools. reasoning thinks first, A²FM style: one call that
writes `<reasoning>…</reasoning>` and then the answer (untagged reasoning that ends normally counts
too, its last line being the answer); when the reasoning stops without an answer (cut off at the
token cap, or a closed tag with nothing after it), a second call continues it and asks for the
answer. agentic writes a plan, calls tools (independent calls together
in one response), summarises every few tool rounds, and answers; its last allowed call has no
tools, so a turn that reaches the cap still ends with an answer.

The graph calls `mode_step` to build each request and `step_message` to turn the response into the
message it stores. Intermediate steps (reasoning, plan, summary) are stored as assistant messages
whose `reasoning` holds the text and whose metadata names the step; `loops_back` tells the graph
to call the model again after one. Mode instructions, and the current turn's intermediate steps,
travel in the request's system message only; the agent's own system prompt is never changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings
from agent.plugin_api import Mode

StepKind = Literal["answer", "reason", "plan", "act", "summary"]
STEP_KEY = "rein_step"
"""Metadata key marking an intermediate step message (its value: reasoning, plan or summary)."""
_INTERMEDIATE = ("reasoning", "plan", "summary")
_LABELS = {"reasoning": "Your reasoning so far", "plan": "Your plan", "summary": "Your summary so far"}

_REASONING_RE = re.compile(r"<reasoning>(.*?)(?:</reasoning>|$)", re.S | re.I)
_CLASSIFICATION_RE = re.compile(r"^\s*<classification>.*?</classification>\s*", re.S | re.I)


@dataclass(frozen=True)
class StepLimits:
    """Maximum model calls per user turn, per mode."""

    instant: int = 1
    """Instant answers in one call."""
    reasoning: int = 2
    """Reasoning and answer in one call, or a reasoning call then an answer call."""
    agentic: int = 12
    """Plan, tool rounds, summaries, answer."""

    def for_mode(self, mode: Mode) -> int:
        """The cap of one mode."""
        return int(getattr(self, mode))


@dataclass(frozen=True)
class ModeConfig:
    """Per-request instructions and cadence of the mode paths."""

    instant_instruction: str = "Answer the user directly and concisely. Do not explain your answer."
    """Added to the system message of the single instant call."""
    reasoning_instruction: str = (
        "Think the problem through step by step before answering. Write your reasoning between "
        "<reasoning> and </reasoning>, then write the final answer after the closing tag."
    )
    """Added to the system message of the reasoning call."""
    answer_instruction: str = "Now state only the final answer, in one short sentence."
    """Asked after the reasoning when a second call must turn it into an answer."""
    plan_instruction: str = (
        "Before acting, write a short plan as numbered steps: what you need to find out or do and "
        "which tool gives it, and which tool calls are independent so they can be made together "
        "in one step. Do not answer yet and do not call tools now."
    )
    """Added to the first agentic call, which is offered no tools but told their names."""
    act_instruction: str = (
        "Follow your plan. Call the tools you need; make independent calls together in one "
        "response. When you have what you need, answer the user."
    )
    """Added to agentic calls that are offered tools."""
    summary_instruction: str = (
        "Briefly summarise what the tool results so far establish and what is still missing. "
        "Do not call tools and do not answer yet."
    )
    """Added to the periodic agentic summary call, which is offered no tools."""
    final_instruction: str = (
        "You have no tool calls left. Answer the user now with what you know."
    )
    """Added to the last allowed agentic call."""
    agentic_plan: bool = True
    """Start each agentic turn with a plan call (offered no tools)."""
    summary_every: int = 3
    """Tool rounds between agentic summaries; 0 turns summaries off."""
    final_answer_step: bool = True
    """Make the last allowed agentic call a tool-free answer, so a turn at its cap still answers."""
    step_max_tokens: int | None = 128
    """Token cap of plan and summary calls (the smaller of this and the agent's max_tokens)."""


A2FM_MODES = ModeConfig()
"""A²FM's paths: instant answers, reasoning thinks then answers, agentic plans, acts, summarises."""

PLAIN_AGENTIC = ModeConfig(agentic_plan=False, summary_every=0, final_answer_step=False, act_instruction="")
"""The same instant and reasoning paths, but agentic as a bare tool loop: no plan, summaries or
added instruction, tools offered on every call (a tau2-bench-style agent)."""


@dataclass(frozen=True)
class ModeStep:
    """One model call of a mode path: what kind of step it is and the request to send."""

    mode: Mode
    """The turn's mode."""
    kind: StepKind
    """answer, reason, plan, act or summary."""
    request: ModelRequest
    """The request for the model."""
    final: bool
    """Whether this call must end the turn (its text becomes the answer)."""


def offered_tools(mode: Mode, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Only the agentic mode acts with tools; instant and reasoning answer from the model alone."""
    return tools if mode == "agentic" else []


def settings_for(mode: Mode, base: ModelSettings) -> ModelSettings:
    """Request settings of a mode: tools are switched off outside the agentic mode."""
    if mode == "agentic":
        return base
    return base.model_copy(update={"tool_choice": None})


def step_of(message: Message | dict[str, Any]) -> str | None:
    """The intermediate step a stored message holds (reasoning, plan, summary), or None."""
    meta = message.get("metadata") if isinstance(message, dict) else message.metadata
    value = (meta or {}).get(STEP_KEY)
    return value if value in _INTERMEDIATE else None


def loops_back(message: Message | dict[str, Any]) -> bool:
    """Whether the graph must call the model again after this message (an intermediate step)."""
    return step_of(message) is not None


def current_turn(history: list[Message]) -> list[Message]:
    """Messages after the last user message: what this turn has produced so far."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].role == "user":
            return history[i + 1 :]
    return list(history)


def next_kind(mode: Mode, turn: list[Message], step: int, limit: int, config: ModeConfig = A2FM_MODES) -> tuple[StepKind, bool]:
    """Which step comes next in a mode's path, and whether it is the last call allowed."""
    last_call = step >= limit - 1
    if mode == "instant":
        return "answer", True
    if mode == "reasoning":
        reasoned = any(step_of(m) == "reasoning" for m in turn)
        return ("answer", True) if reasoned else ("reason", last_call)
    if last_call and config.final_answer_step:
        return "answer", True
    if config.agentic_plan and not any(step_of(m) == "plan" for m in turn):
        return "plan", False
    rounds = 0
    for m in reversed(turn):
        if step_of(m) in ("plan", "summary"):
            break
        if m.role == "assistant" and m.tool_calls:
            rounds += 1
    tool_result_last = bool(turn) and turn[-1].role == "tool"
    # A summary needs room for at least one more call after it, or it would end the turn.
    if config.summary_every and tool_result_last and rounds >= config.summary_every and step < limit - 2:
        return "summary", False
    return "act", False


def mode_step(
    mode: Mode,
    history: list[Message],
    tools: list[dict[str, Any]],
    settings: ModelSettings,
    *,
    system: str = "",
    step: int = 0,
    limit: int | None = None,
    config: ModeConfig = A2FM_MODES,
) -> ModeStep:
    """The next model call of a turn in the given mode.

    history is the whole thread (system prompt excluded); step counts the model calls made this
    turn; limit is the mode's cap (StepLimits.for_mode by default).
    """
    limit = StepLimits().for_mode(mode) if limit is None else limit
    kind, final = next_kind(mode, current_turn(history), step, limit, config)
    instruction = {
        "answer": config.instant_instruction if mode == "instant" else config.answer_instruction,
        "reason": config.reasoning_instruction,
        "plan": config.plan_instruction,
        "act": config.act_instruction,
        "summary": config.summary_instruction,
    }[kind]
    if mode == "agentic" and kind == "answer":
        instruction = config.final_instruction
    if kind == "plan" and tools:
        # The plan call is offered no tools, so it is told what the next calls will have.
        instruction += "\n\nTools you will have:\n" + "\n".join(_describe(t) for t in tools)
    offered = tools if kind == "act" else []
    update: dict[str, Any] = {}
    if not offered:
        update["tool_choice"] = None
    if kind in ("plan", "summary") and config.step_max_tokens:
        cap = config.step_max_tokens
        update["max_tokens"] = min(cap, settings.max_tokens) if settings.max_tokens else cap
    messages, notes = _for_model(history)
    if mode == "reasoning" and kind == "answer" and notes:
        # The answer call continues the model's own reasoning turn and is asked, last, to conclude:
        # small models follow a closing request better than a system line far above.
        reasoning = "\n\n".join(n.split(":\n", 1)[-1] for n in notes)
        messages += [Message.assistant(reasoning), Message.user(instruction)]
        instruction, notes = "", []
    full_system = "\n\n".join(p for p in (system, instruction, *notes) if p)
    request = ModelRequest(
        messages=[Message.system(full_system), *messages] if full_system else messages,
        tools=offered,
        settings=settings.model_copy(update=update) if update else settings,
    )
    return ModeStep(mode=mode, kind=kind, request=request, final=final)


def step_message(step: ModeStep, response: ModelResponse) -> Message:
    """The message a step's response adds to the history."""
    text = _CLASSIFICATION_RE.sub("", response.text, count=1)
    message = Message.assistant(text, list(response.tool_calls), response.reasoning)
    if step.kind != "act":
        message.tool_calls = []  # no tools were offered; a hallucinated call must not dangle
    if step.kind == "reason":
        reasoning, answer, closed = split_reasoning(text)
        if response.reasoning:
            reasoning = f"{response.reasoning}\n{reasoning}".strip()
        tagged = _REASONING_RE.search(text) is not None
        if response.reasoning and not tagged and text.strip():
            message.content = text  # a model with a native reasoning channel answered in the text
        elif (closed and answer) or step.final:
            message.content = answer if closed and answer else (reasoning if closed else text)
            message.reasoning = reasoning or None
        elif not tagged and text.strip() and response.finish_reason != "length":
            # Reasoning written without the tags but finished: the conclusion is its last line.
            lines = [line for line in text.strip().splitlines() if line.strip()]
            message.content = lines[-1].strip() if lines else ""
            message.reasoning = "\n".join(lines[:-1]) or None
        else:
            message.content = ""
            message.reasoning = reasoning or text
            message.metadata[STEP_KEY] = "reasoning"
    elif step.kind in ("plan", "summary"):
        message.content = ""
        message.reasoning = "\n".join(p for p in (response.reasoning, text.strip()) if p) or "(empty)"
        message.metadata[STEP_KEY] = step.kind
    elif step.kind == "answer" and step.mode == "reasoning":
        _, answer, closed = split_reasoning(text)
        message.content = answer if closed and answer else text
    return message


def split_reasoning(text: str) -> tuple[str, str, bool]:
    """Split `<reasoning>R</reasoning> A` into (R, A, closed); text without the tag is all answer."""
    match = _REASONING_RE.search(text)
    if match is None:
        return "", text.strip(), False
    closed = match.group(0).lower().endswith("</reasoning>")
    answer = (text[: match.start()] + text[match.end() :]).strip() if closed else ""
    return match.group(1).strip(), answer, closed


def _describe(schema: dict[str, Any]) -> str:
    fn = schema.get("function", schema)
    description = str(fn.get("description") or "").strip().split("\n")[0]
    return f"- {fn.get('name', '?')}: {description}" if description else f"- {fn.get('name', '?')}"


def _for_model(history: list[Message]) -> tuple[list[Message], list[str]]:
    """History as the model sees it, and this turn's intermediate steps as notes.

    Intermediate steps leave the message list: earlier turns' are dropped (their final answers
    carry the outcome) and this turn's travel in the request's system message, because adapters
    may drop the `reasoning` field and some render any assistant text as a final answer.
    """
    start = 0
    for i in range(len(history) - 1, -1, -1):
        if history[i].role == "user":
            start = i
            break
    # The earlier turns are the bulk of a long conversation: filtered inline, without a call per
    # message (most carry no metadata at all).
    messages = [m for m in history[:start + 1] if not (m.metadata and m.metadata.get(STEP_KEY) in _INTERMEDIATE)]
    notes: list[str] = []
    for m in history[start + 1 :]:
        kind = step_of(m)
        if kind is None:
            messages.append(m)
        else:
            notes.append(f"{_LABELS[kind]}:\n{m.reasoning or ''}")
    return messages, notes


__all__ = [
    "A2FM_MODES",
    "PLAIN_AGENTIC",
    "STEP_KEY",
    "ModeConfig",
    "ModeStep",
    "StepKind",
    "StepLimits",
    "current_turn",
    "loops_back",
    "mode_step",
    "next_kind",
    "offered_tools",
    "settings_for",
    "split_reasoning",
    "step_message",
    "step_of",
]
