"""The OpenAI-compatible server driven by the real `openai` client over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from agent.messages import ModelRequest
from agent.models import FunctionModel, call
from agent.planted_reasoning import surface_dialogue
from agent.plugin_api import InterventionContext, Plant
from agent.runtime import Agent
from agent.server import BackgroundServer, ServerConfig, create_app, key_id, storage_id
from tools import tool

KEYS = ["test-key-1", "test-key-2"]
BODY_LIMIT = 64 * 1024


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def users_in(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m.role == "user")


def bot(request: ModelRequest) -> object:
    """Numbers its answers by the user turns it sees, so lost or repeated turns show."""
    last = request.messages[-1]
    if last.role == "tool":
        return f"The sum is {last.text}."
    if "add" in last.text:
        return call("add", {"a": 2, "b": 3}, text="Adding.")
    return f"[{users_in(request)}] {last.text}"


FLAKY_FAILS: set[str] = set()


def flaky(request: ModelRequest) -> str:
    text = request.messages[-1].text
    if text.startswith("boom") and text not in FLAKY_FAILS:
        FLAKY_FAILS.add(text)
        raise RuntimeError("model backend unavailable")
    return f"[{users_in(request)}] {text}"


async def slow(request: ModelRequest) -> str:
    await asyncio.sleep(0.4)
    return f"[{users_in(request)}] {request.messages[-1].text}"


class Coach:
    """An intervention that plants a note on every second turn."""

    name = "coach"

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        if ctx.turn % 2:
            return Plant(f"Turn {ctx.turn}: keep it short.", record={"reason": "odd turn"})
        return None


def coached(request: ModelRequest) -> str:
    """Says "noted" when this turn carries a planted think call."""
    last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
    planted = any(m.tool_calls for m in request.messages[last_user:])
    return f"[{users_in(request)}] {'noted' if planted else request.messages[last_user].text}"


def make_agents(db: Path) -> dict[str, Agent]:
    spec = f"sqlite:{db}"
    return {
        "bot": Agent(FunctionModel(bot), [add], checkpointer=spec, name="bot"),
        "coach": Agent(FunctionModel(coached), checkpointer=spec, name="coach", interventions=[Coach()]),
        "flaky": Agent(FunctionModel(flaky), checkpointer=spec, name="flaky"),
        "slow": Agent(FunctionModel(slow), checkpointer=spec, name="slow"),
    }


def client(url: str, key: str | None = KEYS[0], **kw: object) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key=key or "none", max_retries=0,
                  http_client=httpx.Client(trust_env=False, timeout=30), **kw)


def aclient(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{url}/v1", api_key=KEYS[1], max_retries=0,
                       http_client=httpx.AsyncClient(trust_env=False, timeout=30))


class Served:
    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "threads.sqlite"
        self.agents = make_agents(self.db)
        self.app = create_app(self.agents, api_keys=KEYS, config=ServerConfig(max_body_bytes=BODY_LIMIT, request_timeout_s=30))
        self.server = BackgroundServer(self.app).start()
        self.url = self.server.url

    def history(self, agent: str, thread_id: str, key: str = KEYS[0]) -> list:
        """The thread as the tenant of `key` (each key is its own tenant here) stores it."""
        return self.agents[agent].history(storage_id(agent, thread_id, key_id(key)))

    def surface(self, agent: str, thread_id: str, key: str = KEYS[0]) -> list[tuple[str, str]]:
        return [(m.role, m.text) for m in surface_dialogue(self.history(agent, thread_id, key))]

    def close(self) -> None:
        self.server.stop()
        for agent in self.agents.values():
            agent.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("server"))
    yield s
    s.close()


def new_thread() -> dict[str, str]:
    return {"X-Rein-Thread": f"t-{uuid.uuid4().hex[:12]}"}


def test_models_and_health(served: Served) -> None:
    c = client(served.url)
    assert sorted(m.id for m in c.models.list()) == ["bot", "coach", "flaky", "slow"]
    assert c.models.retrieve("bot").id == "bot"
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("gpt-4o")
    health = httpx.get(f"{served.url}/healthz", trust_env=False)  # no key needed
    assert health.status_code == 200 and health.json() == {"status": "ok"}


def test_chat_returns_answer_usage_and_rein_metadata(served: Served) -> None:
    r = client(served.url).chat.completions.create(
        model="bot", messages=[{"role": "system", "content": "ignored"}, {"role": "user", "content": "hello"}],
        temperature=0.3, extra_headers=new_thread(),
    )
    assert r.choices[0].message.content == "[1] hello"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.total_tokens > 0
    rein = r.model_extra["rein"]
    assert rein["mode"] == "agentic" and rein["termination"] == "agent_stop" and rein["action"] == "append"
    assert rein["usage"]["requests"] == 1 and rein["interventions"] == []


def test_agent_tools_run_on_the_server(served: Served) -> None:
    headers = new_thread()
    r = client(served.url).chat.completions.create(model="bot", messages=[{"role": "user", "content": "add please"}],
                                                   extra_headers=headers)
    assert r.choices[0].message.content == "Adding.\n\nThe sum is 5."
    assert r.model_extra["rein"]["usage"]["requests"] == 2
    history = served.history("bot", headers["X-Rein-Thread"])
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]


def test_streaming_chunks_assemble_to_the_committed_answer(served: Served) -> None:
    headers = new_thread()
    stream = client(served.url).chat.completions.create(
        model="bot", messages=[{"role": "user", "content": "add them"}], stream=True,
        stream_options={"include_usage": True}, extra_headers=headers,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Adding.\n\nThe sum is 5."
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finish] == ["stop"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None and last.usage.total_tokens > 0
    assert last.model_extra["rein"]["thread_id"] == headers["X-Rein-Thread"]
    assert last.model_extra["rein"]["termination"] == "agent_stop"
    events = [c.model_extra["rein"]["event"] for c in chunks if "event" in (c.model_extra or {}).get("rein", {})]
    assert {"type": "mode", "mode": "agentic", "reason": "fixed", "scores": {}} in events
    # The next turn, sent as the full history the client assembled, continues the same thread.
    r = client(served.url).chat.completions.create(model="bot", extra_headers=headers, messages=[
        {"role": "user", "content": "add them"}, {"role": "assistant", "content": text},
        {"role": "user", "content": "thanks"}])
    assert r.choices[0].message.content == "[2] thanks"
    assert served.surface("bot", headers["X-Rein-Thread"]) == [
        ("user", "add them"), ("assistant", "Adding."), ("assistant", "The sum is 5."),
        ("user", "thanks"), ("assistant", "[2] thanks")]


def test_streaming_without_usage_puts_rein_on_the_finish_chunk(served: Served) -> None:
    chunks = list(client(served.url).chat.completions.create(
        model="bot", messages=[{"role": "user", "content": "yo"}], stream=True, extra_headers=new_thread()))
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["rein"]["action"] == "append"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "[1] yo"


def test_interventions_are_reported_and_plants_stay_out_of_the_dialogue(served: Served) -> None:
    c = client(served.url)
    messages = [{"role": "user", "content": "first"}]
    r1 = c.chat.completions.create(model="coach", messages=messages)
    assert r1.model_extra["rein"]["interventions"] == [
        {"name": "coach", "activated": False, "turn": 0, "latency_s": pytest.approx(0, abs=1)}]
    messages += [{"role": "assistant", "content": r1.choices[0].message.content}, {"role": "user", "content": "second"}]
    chunks = list(c.chat.completions.create(model="coach", messages=messages, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "[2] noted"
    events = [ch.model_extra["rein"]["event"] for ch in chunks if "event" in (ch.model_extra or {}).get("rein", {})]
    planted = [e for e in events if e["type"] == "intervention"]
    assert len(planted) == 1 and planted[0]["activated"] and planted[0]["record"]["text"] == "Turn 1: keep it short."
    final = chunks[-1].model_extra["rein"]
    assert final["interventions"][0]["via"] == "think_tool" and final["interventions"][0]["reason"] == "odd turn"
    # The planted think call is in the thread but not in the dialogue the client reconciles against.
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "third"}]
    r3 = c.chat.completions.create(model="coach", messages=messages)
    assert r3.choices[0].message.content == "[3] third" and r3.model_extra["rein"]["action"] == "append"
    thread = r3.model_extra["rein"]["thread_id"]
    assert served.surface("coach", thread) == [(m["role"], m["content"]) for m in messages] + [("assistant", "[3] third")]
    history = served.history("coach", thread)
    assert sum(1 for m in history if m.metadata.get("planted_by") == "coach") == 2


def test_a_client_that_disconnects_mid_stream_does_not_cut_the_turn(served: Served) -> None:
    headers = new_thread()
    body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "bye"}]}
    with httpx.stream("POST", f"{served.url}/v1/chat/completions", json=body, trust_env=False,
                      headers={"Authorization": f"Bearer {KEYS[0]}", **headers}) as response:
        assert response.status_code == 200
        first = next(response.iter_lines())
        assert first.startswith("data: ")
    deadline = time.monotonic() + 5
    while len(served.surface("slow", headers["X-Rein-Thread"])) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.surface("slow", headers["X-Rein-Thread"]) == [("user", "bye"), ("assistant", "[1] bye")]


def test_thread_header_continuity_with_new_messages_only(served: Served) -> None:
    headers, c = new_thread(), client(served.url)
    answers = [c.chat.completions.create(model="bot", messages=[{"role": "user", "content": f"msg {i}"}],
                                         extra_headers=headers).choices[0].message.content for i in range(3)]
    assert answers == ["[1] msg 0", "[2] msg 1", "[3] msg 2"]
    assert served.surface("bot", headers["X-Rein-Thread"]) == [
        ("user", "msg 0"), ("assistant", "[1] msg 0"), ("user", "msg 1"), ("assistant", "[2] msg 1"),
        ("user", "msg 2"), ("assistant", "[3] msg 2")]
    # X-Thread-Id names the same thread.
    r = c.chat.completions.create(model="bot", messages=[{"role": "user", "content": "msg 3"}],
                                  extra_headers={"X-Thread-Id": headers["X-Rein-Thread"]})
    assert r.choices[0].message.content == "[4] msg 3"


@pytest.mark.parametrize("keyed_by", ["derived", "user"])
def test_resent_history_is_reconciled_without_duplicates(served: Served, keyed_by: str) -> None:
    c = client(served.url)
    extra = {"user": f"u-{uuid.uuid4().hex[:8]}"} if keyed_by == "user" else {}
    first = f"hello {uuid.uuid4().hex[:6]}"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": first}]
    thread_ids = set()
    for i in range(3):
        r = c.chat.completions.create(model="bot", messages=messages, **extra)
        thread_ids.add(r.model_extra["rein"]["thread_id"])
        assert r.choices[0].message.content.startswith(f"[{i + 1}]")
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": f"next {i}"}]
    (thread_id,) = thread_ids
    if keyed_by == "user":
        assert thread_id == extra["user"]
    else:
        assert thread_id.startswith("conv-")
    expected = [(m["role"], m["content"]) for m in messages[1:-1]]
    assert served.surface("bot", thread_id) == expected
    # A retry of the last request (same body, marked as the SDK marks its retries) replays the
    # committed answer; nothing is added.
    retry = c.chat.completions.create(model="bot", messages=messages[:-2], extra_headers={"X-Stainless-Retry-Count": "1"},
                                      **extra)
    assert retry.model_extra["rein"]["action"] == "replay"
    assert retry.choices[0].message.content == messages[-2]["content"]
    assert served.surface("bot", thread_id) == expected


def test_edited_history_forks_deterministically(served: Served) -> None:
    c = client(served.url)
    user = {"user": f"u-{uuid.uuid4().hex[:8]}"}
    m = [{"role": "user", "content": "one"}]
    a1 = c.chat.completions.create(model="bot", messages=m, **user).choices[0].message.content
    m += [{"role": "assistant", "content": a1}, {"role": "user", "content": "two"}]
    a2 = c.chat.completions.create(model="bot", messages=m, **user).choices[0].message.content
    base = user["user"]
    before = served.surface("bot", base)
    # The user edits their second message: the thread forks; the original is untouched.
    edited = m[:2] + [{"role": "user", "content": "TWO (edited)"}]
    r = c.chat.completions.create(model="bot", messages=edited, **user)
    fork = r.model_extra["rein"]["thread_id"]
    assert fork != base and fork.startswith(base + "~") and r.model_extra["rein"]["forked_from"] == base
    assert r.choices[0].message.content == "[2] TWO (edited)"
    assert served.surface("bot", base) == before == [("user", "one"), ("assistant", a1), ("user", "two"), ("assistant", a2)]
    # Continuing the edited conversation stays on the same fork.
    edited += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "three"}]
    r2 = c.chat.completions.create(model="bot", messages=edited, **user)
    assert r2.model_extra["rein"]["thread_id"] == fork
    assert served.surface("bot", fork) == [(x["role"], x["content"]) for x in edited] + [("assistant", "[3] three")]


def test_auth_failures_are_401(served: Served) -> None:
    for key in ("wrong-key", KEYS[0] + "x", KEYS[0][:-1]):
        with pytest.raises(openai.AuthenticationError) as info:
            client(served.url, key=key).chat.completions.create(model="bot", messages=[{"role": "user", "content": "hi"}])
        assert info.value.status_code == 401
        assert info.value.body["code"] == "invalid_api_key"
    # The openai client always sends a key; a request without one is made by hand.
    for path, method in (("/v1/models", "GET"), ("/v1/chat/completions", "POST")):
        raw = httpx.request(method, f"{served.url}{path}", trust_env=False,
                            json={"model": "bot", "messages": [{"role": "user", "content": "hi"}]})
        assert raw.status_code == 401 and raw.json()["error"]["code"] == "invalid_api_key"
        assert "missing API key" in raw.json()["error"]["message"]
        assert raw.headers["www-authenticate"] == "Bearer"
    assert client(served.url, key=KEYS[1]).models.list().data


def test_unknown_model_is_404(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client(served.url).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["code"] == "model_not_found"
    assert "bot" in info.value.message


@pytest.mark.parametrize(
    ("messages", "extra", "expected"),
    [
        ([{"role": "wizard", "content": "hi"}], {}, "messages.0.role"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], {}, "last message must come from the user"),
        ([], {}, "at least 1 item"),
        ([{"role": "user", "content": "hi"}], {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
         "client-side tools are not supported"),
        ([{"role": "user", "content": "hi"}], {"extra_headers": {"X-Rein-Thread": "a", "X-Thread-Id": "b"}}, "different threads"),
    ],
)
def test_bad_bodies_are_400(served: Served, messages: list, extra: dict, expected: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(served.url).chat.completions.create(model="bot", messages=messages, **extra)
    assert expected in info.value.message


def test_non_json_body_is_400(served: Served) -> None:
    r = httpx.post(f"{served.url}/v1/chat/completions", content=b"{oops", trust_env=False,
                   headers={"Authorization": f"Bearer {KEYS[0]}", "Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_a_wrong_method_is_a_json_405_naming_the_allowed_one(served: Served) -> None:
    r = httpx.get(f"{served.url}/v1/chat/completions", trust_env=False, headers={"Authorization": f"Bearer {KEYS[0]}"})
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_deeply_nested_body_is_400_not_500(served: Served) -> None:
    deep = b'{"model": "bot", "messages": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"  # under the 64 KiB limit
    r = httpx.post(f"{served.url}/v1/chat/completions", content=deep, trust_env=False,
                   headers={"Authorization": f"Bearer {KEYS[0]}", "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    assert "more than 64 levels deep" in r.json()["error"]["message"]


def test_oversized_bodies_are_413(served: Served) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client(served.url).chat.completions.create(model="bot", messages=[{"role": "user", "content": "x" * (2 * BODY_LIMIT)}])
    assert info.value.status_code == 413 and info.value.body["code"] == "request_too_large"
    # Without Content-Length (chunked upload) the streamed size is checked.
    payload = json.dumps({"model": "bot", "messages": [{"role": "user", "content": "y" * (2 * BODY_LIMIT)}]}).encode()

    def chunked() -> Iterator[bytes]:
        for i in range(0, len(payload), 8192):
            yield payload[i : i + 8192]

    r = httpx.post(f"{served.url}/v1/chat/completions", content=chunked(), trust_env=False,
                   headers={"Authorization": f"Bearer {KEYS[0]}"})
    assert r.status_code == 413


def test_model_failure_is_502_and_a_resend_reruns_the_turn(served: Served) -> None:
    headers, c = new_thread(), client(served.url)
    with pytest.raises(openai.InternalServerError) as info:
        c.chat.completions.create(model="flaky", messages=[{"role": "user", "content": "boom 1"}], extra_headers=headers)
    assert info.value.status_code == 502 and "model backend unavailable" in info.value.message
    r = c.chat.completions.create(model="flaky", messages=[{"role": "user", "content": "boom 1"}], extra_headers=headers)
    assert r.choices[0].message.content == "[1] boom 1" and r.model_extra["rein"]["action"] == "rerun"
    assert served.surface("flaky", headers["X-Rein-Thread"]) == [("user", "boom 1"), ("assistant", "[1] boom 1")]


def test_model_failure_in_a_stream_raises_in_the_client(served: Served) -> None:
    stream = client(served.url).chat.completions.create(
        model="flaky", messages=[{"role": "user", "content": "boom 2"}], stream=True, extra_headers=new_thread())
    with pytest.raises(openai.APIError, match="model backend unavailable"):
        list(stream)


async def test_same_thread_requests_are_serialized_and_threads_run_concurrently(served: Served) -> None:
    c = aclient(served.url)
    headers = new_thread()
    results = await asyncio.gather(*(
        c.chat.completions.create(model="slow", messages=[{"role": "user", "content": f"q{i}"}], extra_headers=headers)
        for i in range(3)))
    assert sorted(r.choices[0].message.content[:3] for r in results) == ["[1]", "[2]", "[3]"]
    roles = [role for role, _ in served.surface("slow", headers["X-Rein-Thread"], KEYS[1])]
    assert roles == ["user", "assistant"] * 3
    started = time.perf_counter()
    await asyncio.gather(*(
        c.chat.completions.create(model="slow", messages=[{"role": "user", "content": "hi"}], extra_headers=new_thread())
        for _ in range(6)))
    assert time.perf_counter() - started < 6 * 0.4  # six 0.4 s turns on different threads overlap
    await c.close()


def test_timeout_is_504_and_the_turn_still_commits(tmp_path: Path) -> None:
    agent = Agent(FunctionModel(slow), checkpointer=f"sqlite:{tmp_path / 't.sqlite'}", name="slow")
    app = create_app({"slow": agent}, config=ServerConfig(request_timeout_s=0.15))
    headers = new_thread()
    with BackgroundServer(app) as server:
        c = client(server.url, key=None)
        with pytest.raises(openai.APIStatusError) as info:
            c.chat.completions.create(model="slow", messages=[{"role": "user", "content": "late"}], extra_headers=headers)
        assert info.value.status_code == 504 and info.value.body["code"] == "request_timeout"
        assert "keeps running" in info.value.message
        # Queued behind the running turn, this one times out before it starts and is dropped.
        with pytest.raises(openai.APIStatusError) as queued:
            c.chat.completions.create(model="slow", messages=[{"role": "user", "content": "dropped"}], extra_headers=headers)
        assert queued.value.status_code == 504 and "dropped" in queued.value.message
        time.sleep(0.6)
        r = c.chat.completions.create(model="slow", messages=[{"role": "user", "content": "late"}], extra_headers=headers)
        assert r.choices[0].message.content == "[1] late" and r.model_extra["rein"]["action"] == "replay"
        # A stream that runs past the limit ends with an error event the client raises.
        stream = c.chat.completions.create(model="slow", messages=[{"role": "user", "content": "streamed"}],
                                           stream=True, extra_headers=headers)
        with pytest.raises(openai.APIError, match="did not finish"):
            list(stream)
        time.sleep(0.6)
    history = agent.history(storage_id("slow", headers["X-Rein-Thread"]))
    assert [(m.role, m.text) for m in history] == [
        ("user", "late"), ("assistant", "[1] late"), ("user", "streamed"), ("assistant", "[2] streamed")]
    agent.close()


def test_restart_and_graceful_shutdown_keep_every_committed_turn(tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    headers = new_thread()
    first = BackgroundServer(create_app(make_agents(db))).start()
    c = client(first.url, key=None)
    assert c.chat.completions.create(model="slow", messages=[{"role": "user", "content": "one"}],
                                     extra_headers=headers).choices[0].message.content == "[1] one"
    # A turn in flight when shutdown begins still completes and commits.
    answer: list[str] = []
    worker = threading.Thread(target=lambda: answer.append(c.chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "two"}], extra_headers=headers).choices[0].message.content))
    worker.start()
    time.sleep(0.15)
    first.stop()
    worker.join(10)
    assert answer == ["[2] two"]
    agents = make_agents(db)  # a fresh process's view: new agents on the same database
    with BackgroundServer(create_app(agents)) as second:
        r = client(second.url, key=None).chat.completions.create(
            model="slow", messages=[{"role": "user", "content": "three"}], extra_headers=headers)
        assert r.choices[0].message.content == "[3] three"
    history = agents["slow"].history(storage_id("slow", headers["X-Rein-Thread"]))
    assert [m.text for m in history] == ["one", "[1] one", "two", "[2] two", "three", "[3] three"]
    for agent in agents.values():
        agent.close()
