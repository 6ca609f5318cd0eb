"""A request for another answer gets one; a retry gets the stored answer; two end users of one API
key whose conversations open the same way never share a derived thread (docs/server.md, "Threads
and stateless clients")."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.messages import ModelRequest
from agent.models import FunctionModel
from agent.runtime import Agent
from agent.server import BackgroundServer, create_app, key_id, storage_id

KEY = "web-app-key"
SYSTEM = {"role": "system", "content": "You are the shop's assistant."}
SECRET = "my card ends in 4242"


class Counter:
    """Numbers its answers, so a new answer never equals an old one, and shows every user message
    it was given, so a leaked history shows in the reply."""

    def __init__(self) -> None:
        self.runs = itertools.count(1)

    def __call__(self, request: ModelRequest) -> str:
        users = [m.text for m in request.messages if m.role == "user"]
        if users[-1] == "slow":
            time.sleep(1.0)
        return f"[{next(self.runs)}] " + " | ".join(users)


def serve(keys: list[str], db: Path) -> tuple[BackgroundServer, Agent]:
    agent = Agent(FunctionModel(Counter()), checkpointer=f"sqlite:{db}", name="shop")
    return BackgroundServer(create_app({"shop": agent}, api_keys=keys)).start(), agent


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[tuple[httpx.Client, Agent]]:
    server, agent = serve([], tmp_path / "threads.sqlite")
    with httpx.Client(base_url=server.url, timeout=30, trust_env=False) as client:
        yield client, agent
    server.stop()


def chat(client: httpx.Client, messages: list[dict[str, str]], key: str | None = None, **headers: str) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    r = client.post("/v1/chat/completions", json={"model": "shop", "messages": messages}, headers={**auth, **headers})
    assert r.status_code == 200, r.text
    return r.json()


def said(answer: dict[str, Any]) -> dict[str, str]:
    return {"role": "assistant", "content": answer["choices"][0]["message"]["content"]}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_regenerate_runs_a_new_answer_and_a_retry_gets_the_stored_one(open_server: tuple[httpx.Client, Agent]) -> None:
    client, agent = open_server
    first = chat(client, [SYSTEM, user("hi")])
    history = [SYSTEM, user("hi"), said(first), user("recommend a tent")]
    answer = chat(client, history)
    base = answer["rein"]["thread_id"]
    assert answer["choices"][0]["message"]["content"] == "[2] hi | recommend a tent"
    # The SDK's retry (it never got the answer, as far as it knows) gets the stored answer.
    retry = chat(client, history, **{"X-Stainless-Retry-Count": "1"})
    assert retry["rein"]["action"] == "replay" and retry["choices"][0]["message"] == answer["choices"][0]["message"]
    # Regenerate: the same history, not marked as a retry, after the answer was delivered.
    again = chat(client, history)
    assert again["rein"]["action"] == "append" and again["rein"]["forked_from"] == base
    assert again["choices"][0]["message"]["content"] == "[3] hi | recommend a tent"
    # And once more: another new answer, never the first regenerated one.
    third = chat(client, history)
    assert third["choices"][0]["message"]["content"] == "[4] hi | recommend a tent"
    # The conversation goes on from the answer the client kept; the original thread is untouched.
    going_on = chat(client, [*history, said(again), user("in green")])
    assert going_on["choices"][0]["message"]["content"] == "[5] hi | recommend a tent | in green"
    assert going_on["rein"]["forked_from"] == base
    assert chat(client, [*history, said(again), user("in green"), said(going_on), user("thanks")])["rein"]["thread_id"] \
        == going_on["rein"]["thread_id"]
    assert [m.text for m in agent.history(storage_id("shop", base))] == [
        "hi", "[1] hi", "recommend a tent", "[2] hi | recommend a tent"]


def test_a_regenerate_with_an_idempotency_key_is_retried_safely(open_server: tuple[httpx.Client, Agent]) -> None:
    client, _ = open_server
    first = chat(client, [user("hello")])
    history = [user("hello")]
    assert first["choices"][0]["message"]["content"] == "[1] hello"
    regen = chat(client, history, **{"Idempotency-Key": "regen-1"})
    assert regen["choices"][0]["message"]["content"] == "[2] hello"
    # Its resend (same key) finds the regenerated answer instead of running a third.
    resent = chat(client, history, **{"Idempotency-Key": "regen-1"})
    assert resent["rein"]["action"] == "replay" and resent["choices"][0]["message"] == regen["choices"][0]["message"]
    assert resent["rein"]["thread_id"] == regen["rein"]["thread_id"]


def test_an_answer_the_client_never_received_is_replayed_to_its_resend(open_server: tuple[httpx.Client, Agent]) -> None:
    client, _ = open_server
    history = [user("slow")]
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/chat/completions", json={"model": "shop", "messages": history}, timeout=0.3)
    time.sleep(1.5)  # the turn finishes and commits after the client has gone
    resent = chat(client, history)
    assert resent["rein"]["action"] == "replay" and resent["choices"][0]["message"]["content"] == "[1] slow"
    # A streamed answer read to its end counts as received: the same history again is a new answer.
    streamed = [user("stream it")]
    with client.stream("POST", "/v1/chat/completions", json={"model": "shop", "messages": streamed, "stream": True}) as r:
        assert "[2] stream it" in "".join(r.iter_text())
    again = chat(client, streamed)
    assert again["rein"]["action"] == "append" and again["choices"][0]["message"]["content"] == "[3] stream it"


def test_two_end_users_of_one_key_never_share_a_derived_thread(tmp_path: Path) -> None:
    server, agent = serve([KEY], tmp_path / "threads.sqlite")
    try:
        with httpx.Client(base_url=server.url, timeout=30, trust_env=False) as client:
            opening = [SYSTEM, user("hi")]
            a1 = chat(client, opening, KEY)
            # B opens the same way: a new answer of its own, not A's stored one.
            b1 = chat(client, opening, KEY)
            assert b1["rein"]["action"] == "append" and b1["choices"][0]["message"]["content"] == "[2] hi"
            a2 = chat(client, [*opening, said(a1), user(SECRET)], KEY)
            assert a2["choices"][0]["message"]["content"] == f"[3] hi | {SECRET}"
            # B's next turn carries B's answer, which A's thread does not hold: it never lands there.
            b2 = chat(client, [*opening, said(b1), user("what did I say?")], KEY)
            assert b2["choices"][0]["message"]["content"] == "[4] hi | what did I say?"
            assert b2["rein"]["thread_id"] != a1["rein"]["thread_id"]
            b3 = chat(client, [*opening, said(b1), user("what did I say?"), said(b2), user("again?")], KEY)
            assert b3["rein"]["thread_id"] == b2["rein"]["thread_id"] and SECRET not in str(b3)
            # A's thread holds A's conversation alone, and A goes on there.
            a3 = chat(client, [*opening, said(a1), user(SECRET), said(a2), user("thanks")], KEY)
            assert a3["rein"]["thread_id"] == a1["rein"]["thread_id"] and a3["rein"]["forked_from"] is None
            assert [m.text for m in agent.history(storage_id("shop", a1["rein"]["thread_id"], key_id(KEY)))] == [
                "hi", "[1] hi", SECRET, f"[3] hi | {SECRET}", "thanks", f"[6] hi | {SECRET} | thanks"]
    finally:
        server.stop()
