"""The Responses API (`/v1/responses`) driven by the real `openai` client and the Vercel AI SDK
over loopback HTTP, on a real SQLite threads database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage

from agent.messages import ModelRequest
from agent.models import FunctionModel, call, calls
from agent.runtime import Agent
from agent.server import BackgroundServer, ServerConfig, create_app, key_id, storage_id
from tests.js_support import run_node
from tools import ToolKind, tool

ROOT = Path(__file__).parents[2]
KEYS = ["resp-key-1", "resp-key-2"]
RUNS: dict[str, int] = {}
CANCELLED: list[str] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool(kind=ToolKind.WRITE, needs_approval=True)
def cancel_order(order_id: str) -> str:
    """Cancel an order.

    Args:
        order_id: The order to cancel.
    """
    CANCELLED.append(order_id)
    return f"{order_id} cancelled"


def bot(request: ModelRequest) -> object:
    """Numbers its answers by the user turns it sees, so lost or repeated turns show; counts its
    runs per message, so a turn run twice shows. "cancel X" cancels X, saying so first; "cancel X Y"
    cancels both without a word."""
    last = request.messages[-1]
    if last.role == "tool" and last.name == "cancel_order":
        answers: list[str] = []
        for m in reversed(request.messages):
            if m.role != "tool":
                break
            answers.insert(0, m.text)
        return "Done: " + "; ".join(answers) + "."
    if last.role == "tool":
        return f"The sum is {last.text}."
    RUNS[last.text] = RUNS.get(last.text, 0) + 1
    if last.text.startswith("boom") and RUNS[last.text] == 1:
        raise RuntimeError("model backend unavailable")
    if last.text.startswith("add"):
        return call("add", {"a": 2, "b": 3}, text="Adding.")
    if last.text.startswith("cancel"):
        orders = last.text.split()[1:]
        if len(orders) == 1:
            return call("cancel_order", {"order_id": orders[0]}, id=f"call-{orders[0]}", text="Let me cancel that.")
        return calls(*(call("cancel_order", {"order_id": o}, id=f"call-{o}") for o in orders))
    users = sum(1 for m in request.messages if m.role == "user")
    return f"[{users}] {last.text}"


class Served:
    def __init__(self, tmp: Path) -> None:
        self.agents = {"bot": Agent(FunctionModel(bot), [add, cancel_order], checkpointer=f"sqlite:{tmp / 'threads.sqlite'}", name="bot")}
        self.app = create_app(self.agents, api_keys=KEYS, config=ServerConfig(
            request_timeout_s=30, max_body_bytes=64 * 1024, max_messages=50))
        self.server = BackgroundServer(self.app).start()
        self.url = self.server.url

    def surface(self, thread_id: str, key: str = KEYS[0]) -> list[tuple[str, str]]:
        history = self.agents["bot"].history(storage_id("bot", thread_id, key_id(key)))
        return [(m.role, m.text) for m in history if m.role in ("user", "assistant") and m.text]

    def close(self) -> None:
        self.server.stop()
        self.agents["bot"].close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("responses"))
    yield s
    s.close()


def client(url: str, key: str = KEYS[0]) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, http_client=httpx.Client(trust_env=False, timeout=30))


def word() -> str:
    return uuid.uuid4().hex[:8]


def test_create_with_string_input_answers_with_usage_and_rein_metadata(served: Served) -> None:
    w = word()
    r = client(served.url).responses.create(model="bot", input=f"hello {w}", instructions="Be brief.", metadata={"k": "v"})
    assert r.object == "response" and r.status == "completed" and r.model == "bot"
    assert r.output_text == f"[1] hello {w}"
    assert r.id.startswith("resp_") and r.output[0].id.startswith("msg_")
    assert r.instructions == "Be brief." and r.metadata == {"k": "v"}
    assert r.usage is not None and r.usage.total_tokens > 0
    rein = r.model_extra["rein"]
    assert rein["termination"] == "agent_stop" and rein["action"] == "append" and rein["usage"]["requests"] == 1


def test_list_input_keeps_the_dialogue_and_tools_run_on_the_server(served: Served) -> None:
    w = word()
    r = client(served.url).responses.create(model="bot", input=[
        {"role": "developer", "content": "ignored by the agent"},
        {"role": "user", "content": f"first {w}"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"second {w}"}]},
    ])
    assert r.output_text == f"[2] second {w}"
    r = client(served.url).responses.create(model="bot", input=f"add {w}")
    assert r.output_text == "Adding.\n\nThe sum is 5."


def test_stream_helper_and_create_stream_assemble_the_answer(served: Served) -> None:
    c = client(served.url)
    with c.responses.stream(model="bot", input="add them") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Adding.\n\nThe sum is 5." == final.output_text
    assert final.status == "completed" and final.usage is not None and final.usage.total_tokens > 0
    assert final.model_extra["rein"]["termination"] == "agent_stop"
    w = word()
    events = list(c.responses.create(model="bot", input=f"streamed {w}", stream=True))
    types = [e.type for e in events if e.type != "rein.event"]  # the message opens with its first token
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == f"[1] streamed {w}"
    assert events[-1].response.id == events[0].response.id
    # a streamed response is stored like any other
    assert c.responses.retrieve(events[-1].response.id).output_text == f"[1] streamed {w}"


def test_retrieve_and_previous_response_id_continue_the_thread(served: Served) -> None:
    c = client(served.url)
    w = word()
    first = c.responses.create(model="bot", input=f"one {w}")
    second = c.responses.create(model="bot", input=f"two {w}", previous_response_id=first.id)
    assert second.output_text == f"[2] two {w}"  # the model saw the earlier turn
    assert second.previous_response_id == first.id
    assert second.model_extra["rein"]["thread_id"] == first.model_extra["rein"]["thread_id"]
    third = c.responses.create(model="bot", input=f"three {w}", previous_response_id=second.id)
    assert third.output_text == f"[3] three {w}"
    got = c.responses.retrieve(second.id)
    assert (got.id, got.status, got.output_text, got.output[0].id) == (second.id, "completed", f"[2] two {w}", second.output[0].id)
    # branching from an earlier response continues on a fork: the later turns are not seen
    branch = c.responses.create(model="bot", input=f"other {w}", previous_response_id=first.id)
    assert branch.output_text == f"[2] other {w}"
    assert branch.model_extra["rein"]["forked_from"] == first.model_extra["rein"]["thread_id"]
    assert c.responses.create(model="bot", input=f"on {w}", previous_response_id=branch.id).output_text == f"[3] on {w}"


def test_conversation_names_the_thread(served: Served) -> None:
    c = client(served.url)
    conv, w = f"conv-{word()}", word()
    a = c.responses.create(model="bot", input=f"a {w}", conversation=conv)
    b = c.responses.create(model="bot", input=f"b {w}", conversation={"id": conv})
    assert (a.output_text, b.output_text) == (f"[1] a {w}", f"[2] b {w}")
    assert b.conversation is not None and b.conversation.id == conv
    assert served.surface(conv) == [("user", f"a {w}"), ("assistant", f"[1] a {w}"), ("user", f"b {w}"), ("assistant", f"[2] b {w}")]


def test_another_tenant_cannot_reach_a_response(served: Served) -> None:
    mine, theirs = client(served.url, KEYS[0]), client(served.url, KEYS[1])
    w = word()
    r = mine.responses.create(model="bot", input=f"secret {w}", conversation=f"shared-{w}")
    with pytest.raises(openai.NotFoundError):
        theirs.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.create(model="bot", input="go on", previous_response_id=r.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.create(model="bot", input=[{"type": "item_reference", "id": r.output[0].id}, {"role": "user", "content": "x"}])
    # the same conversation id is a thread of their own
    assert theirs.responses.create(model="bot", input=f"hi {w}", conversation=f"shared-{w}").output_text == f"[1] hi {w}"
    with pytest.raises(openai.AuthenticationError):
        client(served.url, "wrong-key").responses.create(model="bot", input="hi")


def test_item_reference_resolves_an_earlier_output_message(served: Served) -> None:
    c = client(served.url)
    w = word()
    first = c.responses.create(model="bot", input=f"ref {w}", store=True)
    r = c.responses.create(model="bot", input=[
        {"role": "user", "content": f"ref {w}"}, {"type": "item_reference", "id": first.output[0].id},
        {"role": "user", "content": f"next {w}"},
    ])
    assert r.output_text == f"[2] next {w}"
    assert r.model_extra["rein"]["thread_id"] == first.model_extra["rein"]["thread_id"]


def test_errors(served: Served) -> None:
    c = client(served.url)
    with pytest.raises(openai.NotFoundError, match="gpt-4o"):
        c.responses.create(model="gpt-4o", input="hi")
    with pytest.raises(openai.BadRequestError, match="client-side tools"):
        c.responses.create(model="bot", input="hi", tools=[{"type": "function", "name": "f", "parameters": {}}])
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="bot", input="hi", previous_response_id="resp_bm9uZQ")
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve("resp_not-one-of-ours")
    with pytest.raises(openai.BadRequestError, match="end with a user message"):
        c.responses.create(model="bot", input=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    with pytest.raises(openai.BadRequestError, match="not both"):
        c.responses.create(model="bot", input="hi", conversation="c", previous_response_id="resp_x")


def test_limits_of_chat_completions_apply(served: Served) -> None:
    c = client(served.url)
    with pytest.raises(openai.APIStatusError) as too_big:
        c.responses.create(model="bot", input="x" * 70_000)
    assert too_big.value.status_code == 413
    with pytest.raises(openai.BadRequestError, match="at most 50"):
        c.responses.create(model="bot", input=[{"role": "user", "content": "hi"}] * 51)


def test_a_failed_turn_fails_the_response_and_reruns_on_retry(served: Served) -> None:
    c = client(served.url)
    w = word()
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    with pytest.raises(openai.InternalServerError, match="model backend unavailable"):
        c.responses.create(model="bot", input=f"boom {w}", conversation=f"f-{w}", extra_headers=headers)
    r = c.responses.create(model="bot", input=f"boom {w}", conversation=f"f-{w}", extra_headers=headers)
    assert r.output_text == f"[1] boom {w}" and r.model_extra["rein"]["action"] == "rerun"
    events = list(c.responses.create(model="bot", input=f"boom again {w}", stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.status == "failed" and "model backend unavailable" in events[-1].response.error.message


def test_store_false_is_not_retrievable(served: Served) -> None:
    c = client(served.url)
    r = c.responses.create(model="bot", input=f"unstored {word()}", store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)


def test_idempotency_key_retry_does_not_run_twice(served: Served) -> None:
    c = client(served.url)
    w = word()
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    first = c.responses.create(model="bot", input=f"once {w}", conversation=f"idem-{w}", extra_headers=headers)
    again = c.responses.create(model="bot", input=f"once {w}", conversation=f"idem-{w}", extra_headers=headers)
    assert again.id == first.id and again.output_text == first.output_text
    assert again.model_extra["rein"]["action"] == "replay"
    assert RUNS[f"once {w}"] == 1
    # Without a key, the SDK's own retry (it counts its attempts) gets the same response ...
    nxt = c.responses.create(model="bot", input=f"twice {w}", previous_response_id=first.id)
    retry = c.responses.create(model="bot", input=f"twice {w}", previous_response_id=first.id,
                               extra_headers={"X-Stainless-Retry-Count": "1"})
    assert (retry.id, retry.output_text) == (nxt.id, nxt.output_text) and RUNS[f"twice {w}"] == 1
    # ... while the same request sent anew is another response, on a branch of its own.
    other = c.responses.create(model="bot", input=f"twice {w}", previous_response_id=first.id)
    assert other.id != nxt.id and RUNS[f"twice {w}"] == 2
    assert other.model_extra["rein"]["forked_from"] == nxt.model_extra["rein"]["thread_id"]


def test_vercel_ai_sdk_generate_and_stream_text(served: Served) -> None:
    env = {**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    w = word()
    out = run_node("vercel-ai", "call.mjs", f"{served.url}/v1", KEYS[0], f"vercel {w}", env=env)
    assert out["generated"] == f"[1] vercel {w}"
    assert out["followUp"] == f"[2] again vercel {w}"  # the resent history stayed on one thread
    assert out["streamed"] == f"[1] streamed vercel {w}" and out["finishReason"] == "stop"
    assert out["usage"]["inputTokens"] > 0


def decision(call_id: str, approved: bool, reason: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {"approved": approved}
    if reason is not None:
        body["reason"] = reason
    return {"type": "function_call_output", "call_id": call_id, "output": json.dumps(body)}


def test_a_paused_response_answers_function_calls_and_an_approval_resumes_it(served: Served) -> None:
    c, order = client(served.url), f"A-{word()}"
    paused = c.responses.create(model="bot", input=f"cancel {order}")
    assert paused.status == "completed" and paused.output_text == "Let me cancel that."
    message, fc = paused.output
    assert isinstance(message, ResponseOutputMessage) and isinstance(fc, ResponseFunctionToolCall)
    assert (fc.call_id, fc.name, json.loads(fc.arguments), fc.status) == (f"call-{order}", "cancel_order", {"order_id": order}, "completed")
    assert fc.id is not None and fc.id.startswith("fc_")
    rein = paused.model_extra["rein"]
    assert rein["termination"] == "interrupted" and [p["id"] for p in rein["approval"]["pending"]] == [f"call-{order}"]
    assert order not in CANCELLED

    done = c.responses.create(model="bot", input=[decision(fc.call_id, True)], previous_response_id=paused.id)
    assert done.output_text == f"Done: {order} cancelled." and [o.type for o in done.output] == ["message"]
    assert done.model_extra["rein"]["action"] == "resume" and done.model_extra["rein"]["approval"] is None
    assert done.id != paused.id and done.previous_response_id == paused.id
    assert CANCELLED.count(order) == 1
    # Both read back as they were answered, and the chain goes on from either id.
    got = c.responses.retrieve(paused.id)
    assert got.output_text == "Let me cancel that." and [(o.type, o.id) for o in got.output] == [(o.type, o.id) for o in paused.output]
    got = c.responses.retrieve(done.id)
    assert (got.output_text, got.output[0].id, got.previous_response_id) == (done.output_text, done.output[0].id, paused.id)
    nxt = c.responses.create(model="bot", input=f"thanks {order}", previous_response_id=done.id)
    assert nxt.output_text == f"[2] thanks {order}"
    assert c.responses.retrieve(done.id).output_text == done.output_text  # not the later turn's


def test_a_rejection_with_a_reason_never_runs_the_tool(served: Served) -> None:
    c, order = client(served.url), f"B-{word()}"
    paused = c.responses.create(model="bot", input=f"cancel {order}", conversation=f"rej-{order}")
    done = c.responses.create(model="bot", input=[decision(f"call-{order}", False, "it has shipped")], conversation=f"rej-{order}")
    assert done.output_text == "Done: The user declined this tool call. Reason: it has shipped."
    assert order not in CANCELLED and done.model_extra["rein"]["thread_id"] == paused.model_extra["rein"]["thread_id"]
    with pytest.raises(openai.BadRequestError, match="must hold a decision"):
        c.responses.create(model="bot", input=[{"type": "function_call_output", "call_id": "x", "output": "yes"}],
                           conversation=f"rej-{order}")


def test_a_streamed_pause_then_a_streamed_decision(served: Served) -> None:
    c, w = client(served.url), word()
    with c.responses.stream(model="bot", input=f"cancel S1-{w} S2-{w}") as stream:
        types = [e.type for e in stream if e.type != "rein.event"]
        paused = stream.get_final_response()
    # nothing was said: the calls alone, as OpenAI answers a turn that only calls functions
    assert types == ["response.created", "response.in_progress"] + [
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done"] * 2 + ["response.completed"]
    assert [(o.type, o.call_id) for o in paused.output] == [("function_call", f"call-S1-{w}"), ("function_call", f"call-S2-{w}")]
    assert [o.id for o in paused.output] == [o.id for o in c.responses.retrieve(paused.id).output]
    answers = [decision(f"call-S2-{w}", False, "keep it"), decision(f"call-S1-{w}", True)]
    with c.responses.stream(model="bot", input=answers, previous_response_id=paused.id) as stream:
        done = stream.get_final_response()
    assert done.output_text == f"Done: S1-{w} cancelled; The user declined this tool call. Reason: keep it."
    assert CANCELLED.count(f"S1-{w}") == 1 and f"S2-{w}" not in CANCELLED
    assert c.responses.retrieve(done.id).output_text == done.output_text


def test_a_resent_decision_runs_nothing_twice_and_a_new_message_waits(served: Served) -> None:
    c, order = client(served.url), f"R-{word()}"
    paused = c.responses.create(model="bot", input=f"cancel {order}")
    with pytest.raises(openai.ConflictError) as info:
        c.responses.create(model="bot", input="never mind", previous_response_id=paused.id)
    assert info.value.body["code"] == "approval_pending"
    keyed = {"Idempotency-Key": str(uuid.uuid4())}
    first = c.responses.create(model="bot", input=[decision(f"call-{order}", True)], previous_response_id=paused.id,
                               extra_headers=keyed)
    again = c.responses.create(model="bot", input=[decision(f"call-{order}", True)], previous_response_id=paused.id,
                               extra_headers=keyed)
    assert (again.id, again.output_text, again.model_extra["rein"]["action"]) == (first.id, first.output_text, "replay")
    assert CANCELLED.count(order) == 1


def test_another_tenant_cannot_decide(served: Served) -> None:
    mine, theirs = client(served.url, KEYS[0]), client(served.url, KEYS[1])
    order = f"T-{word()}"
    paused = mine.responses.create(model="bot", input=f"cancel {order}", conversation=f"t-{order}")
    with pytest.raises(openai.ConflictError) as info:
        theirs.responses.create(model="bot", input=[decision(f"call-{order}", True)], conversation=f"t-{order}")
    assert info.value.body["code"] == "no_pending_approval"
    with pytest.raises(openai.NotFoundError):
        theirs.responses.create(model="bot", input=[decision(f"call-{order}", True)], previous_response_id=paused.id)
    assert order not in CANCELLED
    mine.responses.create(model="bot", input=[decision(f"call-{order}", True)], previous_response_id=paused.id)
    assert CANCELLED.count(order) == 1


def test_the_docs_approval_example_runs(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    section = text.split("\n## The Responses API\n", 1)[1].split("\n## ", 1)[0]
    example = section.split("**Approvals.**", 1)[1]
    code, expected = example.split("```python\n", 1)[1].split("```", 1)[0], example.split("```text\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "approve.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "REIN_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == expected.strip()
