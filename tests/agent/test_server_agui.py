"""The AG-UI endpoint over loopback HTTP: RunAgentInput in, the protocol's events out, read back with
the protocol's own Python models and driven by the official `@ag-ui/client` in Node."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import RunFinishedEvent, StateSnapshotEvent

from agent.messages import ModelRequest
from agent.models import FunctionModel, call, reply
from agent.plugin_api import InterventionContext, Plant
from agent.runtime import Agent
from agent.server import BackgroundServer, create_app, key_id, storage_id
from tests.js_support import run_node
from tools import tool

KEYS = ["agui-key-1", "agui-key-2"]


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool(needs_approval=True)
def refund(order: str) -> str:
    """Refund an order.

    Args:
        order: The order id.
    """
    return f"refunded {order}"


def users_in(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m.role == "user")


def bot(request: ModelRequest) -> object:
    """Numbers its answers by the user turns it sees, so lost or repeated turns show."""
    last = request.messages[-1]
    if last.role == "tool":
        return f"The sum is {last.text}."
    if "add" in last.text:
        return call("add", {"a": 2, "b": 3}, text="Adding.")
    if last.text.startswith("boom"):
        raise RuntimeError("model backend unavailable")
    if last.text.startswith("think"):
        return reply("Thought.", reasoning="Let me see.")
    return f"[{users_in(request)}] {last.text}"


def clerk(request: ModelRequest) -> object:
    last = request.messages[-1]
    if last.role == "tool":
        return f"Done: {last.text}"
    return call("refund", {"order": "A-1"}, text="Refunding.")


class Coach:
    """Plants a note on every second turn."""

    name = "coach"

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        if ctx.turn % 2:
            return Plant(f"Turn {ctx.turn}: keep it short.", record={"reason": "odd turn"})
        return None


def coached(request: ModelRequest) -> str:
    last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
    planted = any(m.tool_calls for m in request.messages[last_user:])
    return f"[{users_in(request)}] {'noted' if planted else request.messages[last_user].text}"


class Served:
    def __init__(self, tmp: Path) -> None:
        spec = f"sqlite:{tmp / 'threads.sqlite'}"
        self.agents = {
            "bot": Agent(FunctionModel(bot), [add], checkpointer=spec, name="bot"),
            "coach": Agent(FunctionModel(coached), checkpointer=spec, name="coach", interventions=[Coach()]),
            "clerk": Agent(FunctionModel(clerk), [refund], checkpointer=spec, name="clerk"),
        }
        self.server = BackgroundServer(create_app(self.agents, api_keys=KEYS)).start()
        self.url = self.server.url

    def history(self, agent: str, thread_id: str, key: str = KEYS[0]) -> list:
        return self.agents[agent].history(storage_id(agent, thread_id, key_id(key)))

    def close(self) -> None:
        self.server.stop()
        for agent in self.agents.values():
            agent.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("agui"))
    yield s
    s.close()


def run_input(thread: str, *messages: tuple[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread, "runId": uuid.uuid4().hex, "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [{"id": uuid.uuid4().hex, "role": role, "content": text} for role, text in messages],
        **extra,
    }


def post(served: Served, agent: str, body: dict[str, Any], key: str | None = KEYS[0]) -> httpx.Response:
    headers = {"Accept": "text/event-stream"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(f"{served.url}/v1/agui/{agent}", json=body, headers=headers, timeout=30, trust_env=False)


def run(served: Served, agent: str, body: dict[str, Any], key: str = KEYS[0]) -> list[dict[str, Any]]:
    r = post(served, agent, body, key)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[len("data: "):]) for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    return events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def texts(events: list[dict[str, Any]]) -> list[str]:
    """The text of each text message, in order."""
    by_id: dict[str, str] = {}
    for e in events:
        if e["type"] == "TEXT_MESSAGE_START":
            by_id[e["messageId"]] = ""
        elif e["type"] == "TEXT_MESSAGE_CONTENT":
            by_id[e["messageId"]] += e["delta"]
    return list(by_id.values())


def snapshot(events: list[dict[str, Any]]) -> dict[str, Any]:
    (snap,) = [StateSnapshotEvent.model_validate(e) for e in events if e["type"] == "STATE_SNAPSHOT"]
    return snap.snapshot


def new_thread() -> str:
    return f"agui-{uuid.uuid4().hex[:10]}"


def test_a_run_streams_its_lifecycle_text_and_state(served: Served) -> None:
    thread = new_thread()
    body = run_input(thread, ("system", "ignored"), ("user", "hello"))
    events = run(served, "bot", body)
    assert types(events) == [
        "RUN_STARTED", "CUSTOM", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "STATE_SNAPSHOT", "RUN_FINISHED",
    ]
    assert events[0]["threadId"] == thread and events[0]["runId"] == body["runId"]
    assert events[1]["name"] == "rein.mode" and events[1]["value"]["mode"] == "agentic"
    assert texts(events) == ["[1] hello"]
    state = snapshot(events)
    assert state["thread_id"] == thread and state["mode"] == "agentic" and state["termination"] == "agent_stop"
    finished = RunFinishedEvent.model_validate(events[-1])
    assert finished.thread_id == thread and finished.run_id == body["runId"]
    assert finished.outcome is not None and finished.outcome.type == "success"
    assert finished.usage and finished.usage[0].total_tokens


def test_the_agents_tools_stream_as_tool_call_events(served: Served) -> None:
    events = run(served, "bot", run_input(new_thread(), ("user", "add please")))
    kinds = [t for t in types(events) if t != "TEXT_MESSAGE_CONTENT"]
    assert kinds == [
        "RUN_STARTED", "CUSTOM", "TEXT_MESSAGE_START", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "STATE_SNAPSHOT", "RUN_FINISHED",
    ]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    first_text = next(e for e in events if e["type"] == "TEXT_MESSAGE_START")
    assert start["toolCallName"] == "add" and start["parentMessageId"] == first_text["messageId"]
    args = next(e for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args["delta"]) == {"a": 2, "b": 3}
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == start["toolCallId"] and result["content"] == "5"
    assert texts(events) == ["Adding.", "The sum is 5."]


def test_a_resent_history_appends_only_its_new_message(served: Served) -> None:
    thread = new_thread()
    first = run_input(thread, ("user", "hello"))
    assert texts(run(served, "bot", first)) == ["[1] hello"]
    # The client's history as @ag-ui/client keeps it: its messages plus what the run streamed.
    second = run_input(thread, ("user", "hello"), ("assistant", "[1] hello"), ("user", "again"))
    assert texts(run(served, "bot", second)) == ["[2] again"]
    assert [m.role for m in served.history("bot", thread)] == ["user", "assistant", "user", "assistant"]
    # The same run sent again (a retry) gets its answer; nothing runs twice.
    events = run(served, "bot", second)
    assert texts(events) == ["[2] again"] and snapshot(events)["action"] == "replay"
    assert len(served.history("bot", thread)) == 4


def test_a_run_sent_again_by_its_run_id_runs_once(served: Served) -> None:
    """A client that sends only its new message: the runId tells a resent run from a new one."""
    thread = new_thread()
    body = run_input(thread, ("user", "hi"))
    assert texts(run(served, "bot", body)) == ["[1] hi"]
    again = run(served, "bot", body)
    assert texts(again) == ["[1] hi"] and snapshot(again)["action"] == "replay"
    assert texts(run(served, "bot", {**body, "runId": uuid.uuid4().hex})) == ["[2] hi"]


def test_user_content_parts_keep_their_text_and_images(served: Served) -> None:
    thread = new_thread()
    parts = [{"type": "text", "text": "look"},
             {"type": "image", "source": {"type": "data", "value": "iVBORw0KGgo=", "mimeType": "image/png"}}]
    body = run_input(thread)
    body["messages"] = [{"id": "m1", "role": "user", "content": parts}]
    assert texts(run(served, "bot", body)) == ["[1] look"]
    (user, _) = served.history("bot", thread)
    assert user.text == "look"
    assert {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}} in user.content


def test_a_rein_plant_shows_as_a_reasoning_message_and_a_custom_event(served: Served) -> None:
    thread = new_thread()
    run(served, "coach", run_input(thread, ("user", "hi")))
    events = run(served, "coach", run_input(thread, ("user", "hi"), ("assistant", "[1] hi"), ("user", "more")))
    custom = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "rein.intervention"]
    assert custom and custom[0]["value"]["activated"] is True and custom[0]["value"]["name"] == "coach"
    start = next(e for e in events if e["type"] == "REASONING_MESSAGE_START")
    assert start["metadata"] == {"rein.planted_by": "coach"}
    planted = "".join(e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT")
    assert planted == "Turn 1: keep it short."
    order = types(events)
    assert order.index("REASONING_START") < order.index("REASONING_END") < order.index("TEXT_MESSAGE_START")
    assert texts(events) == ["[2] noted"]
    assert snapshot(events)["interventions"][0]["text"] == "Turn 1: keep it short."


def test_the_models_own_reasoning_is_a_reasoning_message_before_the_answer(served: Served) -> None:
    events = run(served, "bot", run_input(new_thread(), ("user", "think first")))
    order = types(events)
    assert order.index("REASONING_START") < order.index("REASONING_END") < order.index("TEXT_MESSAGE_START")
    assert "".join(e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT") == "Let me see."
    start = next(e for e in events if e["type"] == "REASONING_MESSAGE_START")
    assert "metadata" not in start  # the model's own, not a plant
    assert texts(events) == ["Thought."]


def test_a_model_failure_ends_the_run_with_run_error(served: Served) -> None:
    events = run(served, "bot", run_input(new_thread(), ("user", "boom")))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "model_error"
    assert "model backend unavailable" in events[-1]["message"]


def test_an_approval_is_an_interrupt_that_the_next_run_resumes(served: Served) -> None:
    thread = new_thread()
    paused = run(served, "clerk", run_input(thread, ("user", "refund A-1")))
    finished = RunFinishedEvent.model_validate(paused[-1])
    assert finished.outcome is not None and finished.outcome.type == "interrupt"
    (interrupt,) = finished.outcome.interrupts
    call_start = next(e for e in paused if e["type"] == "TOOL_CALL_START")
    assert interrupt.id == interrupt.tool_call_id == call_start["toolCallId"] and interrupt.reason == "tool_approval"
    assert "TOOL_CALL_RESULT" not in types(paused)
    assert snapshot(paused)["approval"]["pending"][0]["name"] == "refund"
    history = [("user", "refund A-1"), ("assistant", "Refunding.")]
    # A new message on the paused thread is refused; the paused call is neither run nor dropped.
    refused = run(served, "clerk", run_input(thread, *history, ("user", "hello?")))
    assert refused[-1]["type"] == "RUN_ERROR" and refused[-1]["code"] == "approval_pending"
    resume = [{"interruptId": interrupt.id, "status": "resolved", "payload": {"approved": True}}]
    resumed = run(served, "clerk", run_input(thread, *history, resume=resume))
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt.id and result["content"] == "refunded A-1"
    assert texts(resumed) == ["Done: refunded A-1"]
    assert RunFinishedEvent.model_validate(resumed[-1]).outcome.type == "success"


def test_a_cancelled_interrupt_declines_the_call(served: Served) -> None:
    thread = new_thread()
    paused = run(served, "clerk", run_input(thread, ("user", "refund A-1")))
    interrupt_id = paused[-1]["outcome"]["interrupts"][0]["id"]
    resumed = run(served, "clerk", run_input(thread, resume=[{"interruptId": interrupt_id, "status": "cancelled"}]))
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert "refunded" not in result["content"]
    assert not any(m.role == "tool" and m.text == "refunded A-1" for m in served.history("clerk", thread))


def test_keys_and_tenants(served: Served) -> None:
    thread = new_thread()
    assert post(served, "bot", run_input(thread, ("user", "hi")), key=None).status_code == 401
    assert post(served, "bot", run_input(thread, ("user", "hi")), key="wrong").status_code == 401
    run(served, "bot", run_input(thread, ("user", "secret")), key=KEYS[0])
    # Another tenant naming the same threadId reaches a thread of its own.
    events = run(served, "bot", run_input(thread, ("user", "hello")), key=KEYS[1])
    assert texts(events) == ["[1] hello"]
    assert [m.text for m in served.history("bot", thread, KEYS[0])] == ["secret", "[1] secret"]
    assert [m.text for m in served.history("bot", thread, KEYS[1])] == ["hello", "[1] hello"]


def test_requests_it_cannot_run_are_refused_before_the_stream(served: Served) -> None:
    thread = new_thread()
    assert post(served, "nobody", run_input(thread, ("user", "hi"))).status_code == 404
    assert post(served, "bot", {"threadId": thread}).status_code == 400
    no_user = post(served, "bot", run_input(thread, ("assistant", "hi")))
    assert no_user.status_code == 400 and "user message" in no_user.json()["error"]["message"]
    tools = [{"name": "f", "description": "a client-side tool", "parameters": {"type": "object"}}]
    with_tools = post(served, "bot", run_input(thread, ("user", "hi"), tools=tools))
    assert with_tools.status_code == 400 and with_tools.json()["error"]["param"] == "tools"
    bad_resume = post(served, "clerk", run_input(thread, resume=[{"interruptId": "x", "status": "resolved", "payload": "yes"}]))
    assert bad_resume.status_code == 400 and bad_resume.json()["error"]["param"] == "resume"


def test_official_ag_ui_client(served: Served) -> None:
    """@ag-ui/client's HttpAgent runs, verifies and applies the events: text, tools, a plant, and an
    interrupt answered through `resume`."""
    out = run_node("agui", "client.mjs", served.url, KEYS[0])
    assert out["first"]["text"] == "[1] hello"
    assert out["first"]["types"][0] == "RUN_STARTED" and out["first"]["types"][-1] == "RUN_FINISHED"
    assert out["first"]["state"]["mode"] == "agentic"
    # The second run sent the whole history the client kept; only its new message was added.
    assert out["second"]["text"] == "[2] again"
    assert out["tools"]["toolCalls"] == [{"name": "add", "arguments": {"a": 2, "b": 3}, "result": "5"}]
    assert out["tools"]["texts"] == ["Adding.", "The sum is 5."]
    assert out["tools"]["after"] == {"text": "[2] thanks", "forkedFrom": None}
    assert out["plant"]["reasoning"] == ["Turn 1: keep it short."]
    assert out["plant"]["custom"] == ["rein.mode", "rein.intervention"]
    assert out["approval"]["interrupts"][0]["reason"] == "tool_approval"
    assert out["approval"]["resumedText"] == "Done: refunded A-1"
    assert out["approval"]["pendingAfter"] == 0
