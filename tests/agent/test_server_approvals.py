"""Approvals over Chat Completions with the real openai SDKs: a turn paused on a tool that needs
approval answers with `tool_calls` and `finish_reason: "tool_calls"`; tool messages holding
decisions resume it from its checkpoint, exactly once, per tenant, across a restart."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from agent.messages import Message, ModelRequest
from agent.models import FunctionModel, ModelError, call, calls
from agent.runtime import Agent
from agent.server import ApiKeys, BackgroundServer, ServerConfig, ServerState, create_app
from agent.server.approvals import Decision
from agent.server.chat_turns import TurnRequest
from agent.server.threads import Turn
from tests.js_support import node_project, run_node
from tools import ToolKind, tool

ROOT = Path(__file__).parents[2]
RAN: list[str] = []
ALICE, BOB = "alice-approvals-key", "bob-approvals-key"


@tool(kind=ToolKind.WRITE, needs_approval=True)
def cancel_order(order_id: str) -> str:
    """Cancel an order.

    Args:
        order_id: The order to cancel.
    """
    RAN.append(order_id)
    return f"{order_id} cancelled"


def clerk(request: ModelRequest) -> object:
    """Cancels the orders named after "cancel", saying so first when it cancels one; then reports."""
    last = request.messages[-1]
    if last.role == "tool":
        answered = []
        for m in reversed(request.messages):
            if m.role != "tool":
                break
            answered.insert(0, m.text)
        return "Done: " + "; ".join(answered) + "."
    words = last.text.split()
    if "cancel" not in words:
        return f"You said {last.text}"
    orders = words[words.index("cancel") + 1 :]
    if len(orders) == 1:
        return call("cancel_order", {"order_id": orders[0]}, id=f"call-{orders[0]}", text="Let me cancel that.")
    return calls(*(call("cancel_order", {"order_id": o}, id=f"call-{o}") for o in orders))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[BackgroundServer, Agent]]:
    RAN.clear()
    agent = Agent(FunctionModel(clerk), [cancel_order], checkpointer=str(tmp_path / "threads.sqlite"))
    app = create_app({"clerk": agent}, api_keys=[ALICE, BOB], config=ServerConfig(request_timeout_s=30))
    with BackgroundServer(app) as server:
        yield server, agent


def client(url: str, key: str = ALICE) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, http_client=httpx.Client(trust_env=False, timeout=30))


def decision(call_id: str, approved: bool, reason: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"approved": approved}
    if reason is not None:
        body["reason"] = reason
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(body)}


def test_plain_round_trip_approves_once(served) -> None:
    server, _ = served
    c = client(server.url)
    messages: list[Any] = [{"role": "user", "content": "cancel A-1"}]
    paused = c.chat.completions.create(model="clerk", messages=messages)
    choice = paused.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me cancel that."
    [tc] = choice.message.tool_calls
    assert (tc.id, tc.function.name, json.loads(tc.function.arguments)) == ("call-A-1", "cancel_order", {"order_id": "A-1"})
    rein = paused.model_extra["rein"]
    assert rein["termination"] == "interrupted" and rein["action"] == "append"
    assert rein["approval"] == {"pending": [{"id": "call-A-1", "name": "cancel_order",
                                             "arguments": '{"order_id": "A-1"}', "reason": None}]}
    assert RAN == []

    # A full-history client sends the assistant message back as the SDK gave it, then its decision.
    messages += [choice.message, decision("call-A-1", True)]
    done = c.chat.completions.create(model="clerk", messages=messages)
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.content == "Done: A-1 cancelled."
    assert done.model_extra["rein"]["action"] == "resume" and done.model_extra["rein"]["approval"] is None
    assert RAN == ["A-1"]

    # The decision again, twice at once (retries): the stored outcome, the tool never runs again.
    with ThreadPoolExecutor(2) as pool:
        again = list(pool.map(lambda _: c.chat.completions.create(model="clerk", messages=messages), range(2)))
    assert [a.choices[0].message.content for a in again] == ["Done: A-1 cancelled."] * 2
    assert {a.model_extra["rein"]["action"] for a in again} == {"replay"}
    assert RAN == ["A-1"]

    # The conversation goes on after the approval.
    messages += [done.choices[0].message, {"role": "user", "content": "thanks"}]
    assert c.chat.completions.create(model="clerk", messages=messages).choices[0].message.content == "You said thanks"


def stream(c: OpenAI, messages: list[Any], thread: str) -> tuple[str, list[Any], Any, dict[str, Any]]:
    """The streamed text, tool call deltas, finish reason and rein metadata of one request."""
    text, deltas, finish, rein = "", [], None, {}
    for chunk in c.chat.completions.create(model="clerk", messages=messages, stream=True,
                                           extra_headers={"X-Rein-Thread": thread}):
        rein = chunk.model_extra.get("rein") or rein
        for ch in chunk.choices:
            text += ch.delta.content or ""
            deltas += ch.delta.tool_calls or []
            finish = ch.finish_reason or finish
    return text, deltas, finish, rein


def test_streamed_round_trip_rejects_with_a_reason(served) -> None:
    server, _ = served
    c = client(server.url)
    text, deltas, finish, rein = stream(c, [{"role": "user", "content": "cancel B-2"}], "s1")
    assert (text, finish, rein["termination"]) == ("Let me cancel that.", "tool_calls", "interrupted")
    assert [(d.index, d.id, d.type, d.function.name, d.function.arguments) for d in deltas] == [
        (0, "call-B-2", "function", "cancel_order", '{"order_id": "B-2"}')]
    assert rein["approval"]["pending"][0]["id"] == "call-B-2"

    # A client naming its thread sends only its decision.
    text, deltas, finish, rein = stream(c, [decision("call-B-2", False, "B-2 has shipped")], "s1")
    assert text == "Done: The user declined this tool call. Reason: B-2 has shipped."
    assert (deltas, finish, rein["action"], rein["termination"]) == ([], "stop", "resume", "agent_stop")
    assert RAN == []
    # Sent again: the same answer, streamed from the thread.
    text, _, _, rein = stream(c, [decision("call-B-2", False, "B-2 has shipped")], "s1")
    assert (text, rein["action"]) == ("Done: The user declined this tool call. Reason: B-2 has shipped.", "replay")

    # The SDK's stream helper gathers the paused calls like any streamed tool call.
    with c.chat.completions.stream(model="clerk", messages=[{"role": "user", "content": "cancel B-3"}],
                                   extra_headers={"X-Rein-Thread": "s2"}) as events:
        final = events.get_final_completion().choices[0]
    assert (final.finish_reason, final.message.content) == ("tool_calls", "Let me cancel that.")
    assert [(t.id, t.function.name) for t in final.message.tool_calls] == [("call-B-3", "cancel_order")]


def test_a_retry_of_the_pause_returns_it_and_runs_nothing(served) -> None:
    server, _ = served
    c = client(server.url)
    ask = [{"role": "user", "content": "cancel C-3"}]
    keyed = {"X-Rein-Thread": "r1", "Idempotency-Key": "ask-1"}
    first = c.chat.completions.create(model="clerk", messages=ask, extra_headers=keyed)
    again = c.chat.completions.create(model="clerk", messages=ask, extra_headers=keyed)
    assert again.model_extra["rein"]["action"] == "replay"
    assert again.choices[0].finish_reason == "tool_calls"
    assert again.choices[0].message.tool_calls == first.choices[0].message.tool_calls
    assert again.choices[0].message.content == "Let me cancel that."
    # A full-history client's resend (no header: the derived thread) is the same pause too.
    derived = c.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "cancel D-4"}])
    resent = c.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "cancel D-4"}])
    assert resent.model_extra["rein"]["action"] == "replay"
    assert resent.model_extra["rein"]["thread_id"] == derived.model_extra["rein"]["thread_id"]
    assert resent.choices[0].message.tool_calls[0].id == "call-D-4"
    assert RAN == []


def test_a_new_message_while_paused_is_409_and_keeps_the_pause(served) -> None:
    server, _ = served
    c = client(server.url)
    header = {"X-Rein-Thread": "n1"}
    paused = c.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "cancel E-5"}], extra_headers=header)
    with pytest.raises(openai.ConflictError) as info:
        c.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "never mind"}], extra_headers=header)
    assert info.value.body["code"] == "approval_pending" and "call-E-5: cancel_order" in info.value.message
    # A full-history client that ignores the pause and says something new: the same answer.
    history = [{"role": "user", "content": "cancel E-5"}, paused.choices[0].message, {"role": "user", "content": "hello?"}]
    with pytest.raises(openai.ConflictError):
        c.chat.completions.create(model="clerk", messages=history, extra_headers=header)
    pending = asyncio.run(server.app.state.rein.pending_approvals("clerk", "n1", api_key=ALICE))
    assert [p.id for p in pending] == ["call-E-5"] and RAN == []
    done = c.chat.completions.create(model="clerk", messages=[decision("call-E-5", True)], extra_headers=header)
    assert done.choices[0].message.content == "Done: E-5 cancelled." and RAN == ["E-5"]


def test_another_tenant_cannot_decide(served) -> None:
    server, _ = served
    alice, bob = client(server.url, ALICE), client(server.url, BOB)
    header = {"X-Rein-Thread": "shared-name"}
    alice.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "cancel F-6"}], extra_headers=header)
    with pytest.raises(openai.ConflictError) as info:
        bob.chat.completions.create(model="clerk", messages=[decision("call-F-6", True)], extra_headers=header)
    assert info.value.body["code"] == "no_pending_approval"
    assert RAN == []
    state = server.app.state.rein
    assert asyncio.run(state.pending_approvals("clerk", "shared-name", api_key=BOB)) == []
    assert [p.id for p in asyncio.run(state.pending_approvals("clerk", "shared-name", api_key=ALICE))] == ["call-F-6"]
    alice.chat.completions.create(model="clerk", messages=[decision("call-F-6", True)], extra_headers=header)
    assert RAN == ["F-6"]


def test_every_paused_call_needs_one_valid_decision(served) -> None:
    server, _ = served
    c = client(server.url)
    header = {"X-Rein-Thread": "two"}
    paused = c.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "cancel G-7 H-8"}], extra_headers=header)
    assert [t.id for t in paused.choices[0].message.tool_calls] == ["call-G-7", "call-H-8"]
    assert paused.choices[0].message.content is None
    bad = [
        ([decision("call-G-7", True)], openai.BadRequestError, "approval_incomplete"),
        ([decision("call-G-7", True), decision("call-X", True)], openai.ConflictError, "approval_mismatch"),
        ([decision("call-G-7", True), {"role": "tool", "tool_call_id": "call-H-8", "content": "yes"}],
         openai.BadRequestError, "invalid_request"),
        ([decision("call-G-7", True), decision("call-G-7", False)], openai.BadRequestError, "invalid_request"),
    ]
    for messages, error, code in bad:
        with pytest.raises(error) as info:
            c.chat.completions.create(model="clerk", messages=messages, extra_headers=header)
        assert info.value.body["code"] == code, info.value.message
    assert RAN == []
    done = c.chat.completions.create(
        model="clerk", messages=[decision("call-H-8", False, "keep it"), decision("call-G-7", True)], extra_headers=header)
    assert done.choices[0].message.content == "Done: G-7 cancelled; The user declined this tool call. Reason: keep it."
    assert RAN == ["G-7"]


async def test_pending_approvals_and_decide_are_the_api_other_protocols_call(tmp_path: Path) -> None:
    RAN.clear()
    agent = Agent(FunctionModel(clerk), [cancel_order], checkpointer=str(tmp_path / "threads.sqlite"))
    state = ServerState({"clerk": agent}, keys=ApiKeys([ALICE]))
    await state.open()
    try:
        tenant = state.owner(api_key=ALICE)
        ask = TurnRequest("clerk", "api", "header", tenant, [Turn("user", "cancel J-9")], [Message.user("cancel J-9")])
        paused = await state.start(ask).done
        assert (paused.finish_reason, [c.id for c in paused.pending]) == ("tool_calls", ["call-J-9"])
        assert [c.name for c in await state.pending_approvals("clerk", "api", tenant=tenant)] == ["cancel_order"]
        outcome = await state.decide("clerk", "api", [Decision("call-J-9", True)], tenant=tenant).done
        assert (outcome.action, outcome.reply, outcome.pending) == ("resume", "Done: J-9 cancelled.", [])
        assert await state.pending_approvals("clerk", "api", tenant=tenant) == []
        again = await state.decide("clerk", "api", [Decision("call-J-9", True)], tenant=tenant).done
        assert (again.action, again.reply) == ("replay", "Done: J-9 cancelled.")
        assert RAN == ["J-9"]
    finally:
        await state.aclose()


@pytest.mark.slow
def test_a_pause_survives_a_restart(tmp_path: Path) -> None:
    db, ledger = tmp_path / "threads.sqlite", tmp_path / "ledger.txt"
    worker = [sys.executable, "-m", "tests.agent.approval_worker", str(db), str(ledger)]
    header = {"X-Rein-Thread": "restart"}

    def serve() -> tuple[subprocess.Popen[str], OpenAI]:
        proc = subprocess.Popen(worker, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("http://"), line
        return proc, OpenAI(base_url=line.strip() + "/v1", api_key="none", max_retries=3,
                            http_client=httpx.Client(trust_env=False, timeout=30))

    proc, c = serve()
    try:
        paused = c.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "cancel K-1"}], extra_headers=header)
        assert paused.choices[0].finish_reason == "tool_calls"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
    assert not ledger.exists()

    proc, c = serve()
    try:
        with pytest.raises(openai.ConflictError):
            c.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "hello"}], extra_headers=header)
        done = c.chat.completions.create(model="clerk", messages=[decision("call-restart", True)], extra_headers=header)
        assert done.choices[0].message.content == "Done: K-1 cancelled."
        again = c.chat.completions.create(model="clerk", messages=[decision("call-restart", True)], extra_headers=header)
        assert again.model_extra["rein"]["action"] == "replay"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert ledger.read_text().split() == ["K-1"]


def test_an_mcp_tool_that_needs_approval_is_served(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from tools.mcp_client import McpServerConfig, mcp_tools

    notes = tmp_path / "notes.txt"
    server_script = ROOT / "tests" / "tools" / "mcp_servers.py"
    tools = mcp_tools(McpServerConfig(command=sys.executable, args=[str(server_script), "stdio"],
                                      env={"NOTES_FILE": str(notes)}, allow=["write_note"]))
    assert tools[0].needs_approval  # destructive: approval by default
    model = FunctionModel(lambda r: "Noted." if r.messages[-1].role == "tool" else call("write_note", key="k", value="v", id="w1"))
    agent = Agent(model, tools, checkpointer=str(tmp_path / "threads.sqlite"))
    with BackgroundServer(create_app({"notes": agent})) as server:
        c = client(server.url, "none")
        header = {"X-Rein-Thread": "mcp"}
        paused = c.chat.completions.create(model="notes", messages=[{"role": "user", "content": "note k=v"}], extra_headers=header)
        assert paused.choices[0].message.tool_calls[0].function.name == "write_note" and not notes.exists()
        done = c.chat.completions.create(model="notes", messages=[decision("w1", True)], extra_headers=header)
        assert done.choices[0].message.content == "Noted."
    assert notes.read_text() == "k=v\n"


def test_the_openai_npm_sdk_round_trip(served) -> None:
    server, _ = served
    result = run_node("openai-approvals", "round_trip.mjs", server.url + "/v1", ALICE)
    assert result["paused"] == {"finish_reason": "tool_calls", "content": "Let me cancel that.",
                                "tool_calls": [["call-L-1", "cancel_order", '{"order_id": "L-1"}']],
                                "pending": ["call-L-1"]}
    assert result["approved"] == {"finish_reason": "stop", "content": "Done: L-1 cancelled.", "action": "resume"}
    assert result["streamed_pause"] == {"text": "Let me cancel that.", "finish_reason": "tool_calls", "ids": ["call-M-2"]}
    assert result["rejected"] == "Done: The user declined this tool call. Reason: not today."
    assert sorted(RAN) == ["L-1"]


def doc_block(language: str) -> str:
    """The first `language` block of docs/server.md's Approvals section."""
    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    section = text.split("\n## Approvals\n", 1)[1].split("\n## ", 1)[0]
    return section.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def test_the_docs_python_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "approve.py"
    script.write_text(doc_block("python"))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "REIN_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == doc_block("text").strip()


def test_the_docs_javascript_example_runs(served) -> None:
    server, _ = served
    folder = node_project("openai-approvals")
    assert (folder / "doc_example.mjs").read_text() == doc_block("js")
    env = {**os.environ, "REIN_URL": server.url + "/v1", "REIN_API_KEY": ALICE}
    done = subprocess.run(["node", "doc_example.mjs"], cwd=folder, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "paused: Let me cancel that. [ 'cancel_order {\"order_id\": \"A-1\"}' ]", "Done: A-1 cancelled."]
    assert RAN == ["A-1"]


def test_a_decision_resent_after_the_model_failed_reruns_the_model_not_the_tool(tmp_path: Path) -> None:
    RAN.clear()
    failures = [ModelError("the provider is down")]

    def flaky(request: ModelRequest) -> object:
        if request.messages[-1].role == "tool" and failures:
            raise failures.pop()
        return clerk(request)

    agent = Agent(FunctionModel(flaky), [cancel_order], checkpointer=str(tmp_path / "threads.sqlite"))
    with BackgroundServer(create_app({"clerk": agent})) as server:
        c, header = client(server.url, "none"), {"X-Rein-Thread": "flaky"}
        c.chat.completions.create(model="clerk", messages=[{"role": "user", "content": "cancel N-1"}], extra_headers=header)
        with pytest.raises(openai.InternalServerError) as info:
            c.chat.completions.create(model="clerk", messages=[decision("call-N-1", True)], extra_headers=header)
        assert info.value.status_code == 502 and RAN == ["N-1"]
        done = c.chat.completions.create(model="clerk", messages=[decision("call-N-1", True)], extra_headers=header)
        assert (done.choices[0].message.content, done.model_extra["rein"]["action"]) == ("Done: N-1 cancelled.", "rerun")
    assert RAN == ["N-1"]
